from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lake.search.relevance import (
    DEFAULT_MIN_RELEVANCE,
    FOUND_RELEVANCE,
    MAX_CODE_TERMS,
    MODEL,
    RelevanceModel,
    code_terms,
    features,
    found_by_meaning,
    literal_relevance,
    reads_as_meaning,
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


def _model(cos: float, lex: float = 0.0) -> float:
    """The fitted model's value of one turn, before any list is looked at."""
    return float(MODEL(np.array([cos]), np.array([math.log1p(lex)]), np.array([0.0]))[0])


def test_the_boundary_cosine_sits_at_the_default_floor() -> None:
    c = MODEL.boundary_cosine
    assert 0.0 < c < 1.0
    assert _model(c) == pytest.approx(DEFAULT_MIN_RELEVANCE)
    # Fixed points of the fitted model: meaning alone must be clearly above the boundary,
    # a shared rare word passes with little meaning, nothing at all never passes.
    assert _model(c + 0.1) > DEFAULT_MIN_RELEVANCE
    assert _model(c - 0.1) < DEFAULT_MIN_RELEVANCE
    assert _model(0.1, 5.0) > DEFAULT_MIN_RELEVANCE
    assert _model(0.0) < 0.1
    assert 0.0 < MODEL.found_shift < c


lists = st.lists(st.tuples(cosines, bm25, trigram), min_size=1, max_size=8)


@given(lists)
def test_a_list_that_found_a_turn_judges_every_turn_nearer_the_boundary(
        turns: list[tuple[float, float, float]]) -> None:
    cos, lex, tri = (np.array(column) for column in zip(*turns, strict=True))
    got = relevance(cos, lex, tri)
    sem, lx, tr = features(cos, lex, tri)
    assert sem is not None
    own = MODEL(sem, lx, tr)
    if own.max() >= FOUND_RELEVANCE and cos.max() >= MODEL.boundary_cosine:
        # every turn as if its cosine were found_shift higher: never lower than its own
        assert got.tolist() == pytest.approx(MODEL(sem + MODEL.found_shift, lx, tr).tolist())
        assert (got >= own).all()
    else:
        # a list that found nothing, or found it by text alone, is scored turn by turn
        assert got.tolist() == own.tolist()
        if own.max() < FOUND_RELEVANCE:  # the floor still leaves a list of nothing empty
            assert (got < DEFAULT_MIN_RELEVANCE).all()


def test_a_rare_word_held_by_one_turn_lets_no_unrelated_turn_through() -> None:
    # "zanzibarite": one turn holds the word (a strong BM25 match, a cosine the model cannot
    # make sense of); the others are the dense arm's nearest rows to a vector of no meaning
    c = MODEL.boundary_cosine
    cos = np.array([0.22, 0.27, 0.24, 0.21, c - 0.01])
    lex = np.array([14.0, np.nan, np.nan, np.nan, np.nan])
    tri = np.array([1.0, np.nan, np.nan, np.nan, np.nan])
    got = relevance(cos, lex, tri)
    assert got[0] >= DEFAULT_MIN_RELEVANCE
    assert (got[1:] < DEFAULT_MIN_RELEVANCE).all()
    assert not found_by_meaning(cos)
    # a dense match truly close in meaning still passes on its own
    close = relevance(np.append(cos, c + 0.05), np.append(lex, np.nan), np.append(tri, np.nan))
    assert close[-1] >= DEFAULT_MIN_RELEVANCE and found_by_meaning(np.append(cos, c + 0.05))
    # once the model reads the query as meaning something, the found list is judged leniently
    meant = relevance(np.array([c + 0.2, c - 0.1]), np.array([14.0, np.nan]),
                      np.array([1.0, np.nan]))
    assert (meant >= DEFAULT_MIN_RELEVANCE).all()


def test_a_list_found_by_words_alone_weighs_each_turn_by_the_share_of_the_query_it_holds(
        ) -> None:
    # "what did we say about draiskadail?" as measured on LoCoMo (bench.rare_words): the
    # planted turn holds the made-up word (61 % of the query's weight); another holds only
    # "say" with a high BM25; the dense arm's best cosine stays under the boundary
    cos = np.array([0.30, 0.153, 0.172])
    lex = np.array([25.71, 19.47, np.nan])
    tri = np.array([np.nan, np.nan, np.nan])
    held = np.array([0.61, 0.39, np.nan])
    assert not found_by_meaning(cos)
    before = relevance(cos, lex, tri)
    assert (before[:2] >= DEFAULT_MIN_RELEVANCE).all()  # the frame word passed the floor
    got = relevance(cos, lex, tri, coverage=held)
    assert got[0] >= DEFAULT_MIN_RELEVANCE and got[1] < DEFAULT_MIN_RELEVANCE
    assert got[2] == before[2]  # a turn the lexical arm did not find is judged as before
    # a list found by meaning reads no coverage: its words may be the history's synonyms
    meant = np.array([MODEL.boundary_cosine + 0.05, 0.153, 0.172])
    assert (relevance(meant, lex, tri, coverage=held) == relevance(meant, lex, tri)).all()
    # nor does a search without the semantic arm, which has nothing but words
    assert (relevance(None, lex, tri, coverage=held) == relevance(None, lex, tri)).all()


@given(cosines, st.floats(0.0, 200.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_holding_more_of_the_query_never_lowers_relevance(cos: float, lex: float, a: float,
                                                          b: float) -> None:
    semantic = np.array([min(cos, MODEL.boundary_cosine - 1e-6)])  # not found by meaning
    low, high = sorted((a, b))

    def judged(share: float) -> float:
        return float(relevance(semantic, np.array([lex]), np.array([np.nan]),
                               coverage=np.array([share]))[0])

    assert judged(low) <= judged(high) <= judged(1.0) + 1e-12
    assert judged(1.0) == pytest.approx(float(relevance(semantic, np.array([lex]),
                                                        np.array([np.nan]))[0]))


def test_found_by_meaning_reads_only_the_cosines_the_arm_found() -> None:
    c = MODEL.boundary_cosine
    assert not found_by_meaning(None)
    assert not found_by_meaning(np.array([np.nan, np.nan]))
    assert found_by_meaning(np.array([np.nan, c]))
    assert not found_by_meaning(np.array([np.nan, c - 1e-9]))


def test_a_weak_turn_passes_the_floor_only_beside_a_found_one() -> None:
    c = MODEL.boundary_cosine
    weak = c - MODEL.found_shift / 2
    alone = relevance(np.array([weak, 0.1]), np.array([np.nan, np.nan]),
                      np.array([np.nan, np.nan]))
    assert (alone < DEFAULT_MIN_RELEVANCE).all()
    found = relevance(np.array([c + 0.2, weak]), np.array([np.nan, np.nan]),
                      np.array([np.nan, np.nan]))
    assert (found >= DEFAULT_MIN_RELEVANCE).all()
    # and the shift moves only the cosine: a model without it scores the list turn by turn
    plain = RelevanceModel(MODEL.bias, MODEL.semantic, MODEL.lexical, MODEL.trigram)
    assert relevance(np.array([c + 0.2, weak]), np.array([np.nan, np.nan]),
                     np.array([np.nan, np.nan]), model=plain)[1] < DEFAULT_MIN_RELEVANCE


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
    with pytest.raises(ValueError, match=">= 0"):
        RelevanceModel(bias=0.0, semantic=1.0, lexical=0.1, trigram=0.0, found_shift=-0.1)


@given(st.text(alphabet="0123456789#-_.:/()[]{}!?*+=@$%^&~ \tabcdefghijkXYZ", max_size=40))
def test_a_word_is_a_token_with_three_letters_in_a_row_and_no_digit(text: str) -> None:
    def word(token: str) -> bool:
        runs = "".join(c if c.isalpha() else " " for c in token).split()
        return any(len(r) >= 3 for r in runs) and not any(c.isdigit() for c in token)

    assert reads_as_meaning(text) == any(word(t) for t in text.split())


def test_words_of_any_script_and_cjk_characters_read_as_meaning() -> None:
    for text in ("budget", "ok budget", "ModleNotFoundError", "Kühlschrank", "холодильник",
                 "東京", "猫", "INC-3147 deploy"):
        assert reads_as_meaning(text), text
    for text in ("#4471", "9876", "x7y9z1", "ID-0000", "INC-9999", "cp1252", "QWERTY123",
                 "3.14159", "?!", "", "ok", "k8s", "PR #4560"):
        assert not reads_as_meaning(text), text


@given(st.lists(cosines, min_size=1, max_size=8), st.data())
def test_a_wordless_query_passes_only_turns_that_hold_it_whole(
        cos: list[float], data: st.DataObject) -> None:
    n = len(cos)
    lex = np.array(data.draw(st.lists(bm25, min_size=n, max_size=n)))
    tri = np.array(data.draw(st.lists(trigram, min_size=n, max_size=n)))
    got = relevance(np.array(cos), lex, tri, meaning=False)
    # whatever the cosines and the BM25: 1 for a whole match, half the word similarity for a
    # part, nothing for a turn the trigram arm did not find
    for value, similarity in zip(got.tolist(), tri.tolist(), strict=True):
        if math.isnan(similarity):
            assert value == 0.0
        elif similarity == 1.0:
            assert value == 1.0
        else:
            assert value == pytest.approx(similarity / 2)
            assert value < DEFAULT_MIN_RELEVANCE
    assert got.tolist() == literal_relevance(tri).tolist()
    assert got.tolist() == relevance(None, lex, tri, meaning=False).tolist()


def test_a_query_of_several_codes_is_judged_by_each_of_them() -> None:
    assert code_terms("mk0 mk100") == ["mk0", "mk100"]
    assert code_terms("INC-3147 PR #4560") == ["INC-3147", "#4560"]
    # one code, with or without a prefix of its own, is judged whole
    for query in ("PR #4560", "INC-9999", "x7y9z1", "???", "ok ok", ""):
        assert code_terms(query) == [], query
    # so is a query of more codes than MAX_CODE_TERMS: the work per search stays bounded
    many = " ".join(f"#{i}" for i in range(MAX_CODE_TERMS + 1))
    assert code_terms(many) == []
    assert len(code_terms(many.rsplit(" ", 1)[0])) == MAX_CODE_TERMS


@given(st.text(alphabet="ab1 -#", max_size=20))
def test_code_terms_are_the_tokens_that_hold_a_digit_when_several_do(query: str) -> None:
    coded = [t for t in query.split() if any(c.isdigit() for c in t)]
    assert code_terms(query) == (coded if len(coded) > 1 else [])


def test_a_code_that_shares_a_part_with_the_history_is_not_found_by_that_part() -> None:
    # "INC-9999" against a turn holding "INC-9124": the BM25 of the shared "inc" is high and
    # the word similarity .625, yet a different number names a different ticket
    got = relevance(np.array([0.7]), np.array([7.8]), np.array([0.625]), meaning=False)
    assert got[0] < DEFAULT_MIN_RELEVANCE
    assert relevance(np.array([0.7]), np.array([7.8]), np.array([0.625]))[0] >= \
        DEFAULT_MIN_RELEVANCE  # the same evidence for a query of words passes


def test_a_wordless_query_passes_a_turn_that_holds_it_whole_whatever_its_bm25() -> None:
    # a lone turn in a partition of its own: its exact code scores a BM25 of ~1
    got = relevance(np.array([0.39, 0.6]), np.array([0.96, np.nan]), np.array([1.0, np.nan]),
                    meaning=False)
    assert got[0] >= DEFAULT_MIN_RELEVANCE > got[1]
    assert relevance(np.array([0.39]), np.array([0.96]), np.array([1.0]))[0] >= \
        DEFAULT_MIN_RELEVANCE  # a query of words passes it on its meaning

