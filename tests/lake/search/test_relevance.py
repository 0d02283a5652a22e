from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lake.search.relevance import (
    DEFAULT_MIN_RELEVANCE,
    MODEL,
    RelevanceModel,
    features,
    relevance,
)

cosines = st.floats(-1.0, 1.0)
bm25 = st.one_of(st.just(math.nan), st.floats(0.0, 200.0))
trigram = st.one_of(st.just(math.nan), st.floats(0.0, 1.0))


def _one(cos: float | None, lex: float, tri: float) -> float:
    semantic = None if cos is None else np.array([cos])
    return float(relevance(semantic, np.array([lex]), np.array([tri]))[0])


@given(cosines, bm25, trigram)
def test_relevance_is_a_share(cos: float, lex: float, tri: float) -> None:
    assert 0.0 <= _one(cos, lex, tri) <= 1.0
    assert 0.0 <= _one(None, lex, tri) <= 1.0


@given(cosines, cosines, bm25, trigram)
def test_more_meaning_never_lowers_relevance(a: float, b: float, lex: float, tri: float) -> None:
    low, high = sorted((a, b))
    assert _one(low, lex, tri) <= _one(high, lex, tri)


@given(cosines, st.floats(0.0, 200.0), st.floats(0.0, 200.0), trigram)
def test_more_words_never_lower_relevance(cos: float, a: float, b: float, tri: float) -> None:
    low, high = sorted((a, b))
    assert _one(cos, math.nan, tri) <= _one(cos, low, tri) <= _one(cos, high, tri)


def test_the_boundary_cosine_sits_at_the_default_floor() -> None:
    c = MODEL.boundary_cosine
    assert 0.0 < c < 1.0
    assert _one(c, math.nan, math.nan) == pytest.approx(DEFAULT_MIN_RELEVANCE)
    # Fixed points of the fitted model: meaning alone must be clearly above the boundary,
    # a shared rare word passes with little meaning, nothing at all never passes.
    assert _one(c + 0.1, math.nan, math.nan) > DEFAULT_MIN_RELEVANCE
    assert _one(c - 0.1, math.nan, math.nan) < DEFAULT_MIN_RELEVANCE
    assert _one(0.1, 5.0, math.nan) > DEFAULT_MIN_RELEVANCE
    assert _one(0.0, math.nan, math.nan) < 0.1


def test_without_the_semantic_arm_any_text_match_passes_the_default_floor() -> None:
    assert _one(None, 0.3, math.nan) >= DEFAULT_MIN_RELEVANCE
    assert _one(None, math.nan, 0.6) >= DEFAULT_MIN_RELEVANCE
    assert _one(None, 10.0, math.nan) > _one(None, 0.3, math.nan)


def test_unranked_turns_get_the_lowest_cosine_seen() -> None:
    sem, lex, tri = features(np.array([0.6, np.nan, 0.3]), np.array([np.nan, 2.0, np.nan]),
                             np.array([np.nan, np.nan, 0.7]))
    assert sem is not None and sem.tolist() == [0.6, 0.3, 0.3]
    assert lex.tolist() == [0.0, pytest.approx(math.log1p(2.0)), 0.0]
    assert tri.tolist() == [0.0, 0.0, 0.7]
    nothing, _, _ = features(np.array([np.nan]), np.array([1.0]), np.array([np.nan]))
    assert nothing is not None and nothing.tolist() == [0.0]


def test_negative_weights_are_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        RelevanceModel(bias=0.0, semantic=1.0, lexical=-0.1, trigram=0.0)
