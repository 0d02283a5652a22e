"""The lexical arm's per-turn weight from the share of the query each turn holds."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lake.search.access import Principal
from lake.search.coverage import (
    IDF_POWER,
    MIN_SHARE,
    coverage,
    coverage_weight,
    coverages,
    turn_stems,
)
from lake.search.query import Query
from lake.search.request import FusionSettings, SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.jobs import run_ingest
from tests.factories import BASE_TIME, make_record, write_jsonl

idfs = st.dictionaries(st.sampled_from("abcdefgh"), st.floats(0.0, 20.0), max_size=8)


@given(idfs, st.sets(st.sampled_from("abcdefghxyz")))
def test_coverage_is_the_held_share_of_the_querys_idf(query_idf: dict[str, float],
                                                     stems: set[str]) -> None:
    got = coverage(query_idf, stems)
    total = sum(w ** IDF_POWER for w in query_idf.values())
    if total <= 0:
        assert got is None
        return
    assert got is not None and 0.0 <= got <= 1.0
    assert got == pytest.approx(
        sum(w ** IDF_POWER for s, w in query_idf.items() if s in stems) / total)
    # holding more of the query never lowers it
    more = coverage(query_idf, stems | set(query_idf))
    assert more == pytest.approx(1.0) and more >= got


@given(idfs, st.lists(st.sets(st.sampled_from("abcdefghxyz")), max_size=5))
def test_coverages_are_each_turns_coverage(query_idf: dict[str, float],
                                          turns: list[set[str]]) -> None:
    got = coverages(query_idf, turns)
    if coverage(query_idf, set()) is None:
        assert got is None
    else:
        assert got == [coverage(query_idf, stems) for stems in turns]


def test_coverage_weighs_rare_words_more() -> None:
    # each stem weighs idf ** 1.5: a name that fills the history (idf 1) beside a rare word
    # (idf 4) holds a ninth of the query, not a fifth
    query = {"jon": 1.0, "turtl": 4.0}
    assert coverage(query, {"turtl"}) == pytest.approx(8 / 9)
    assert coverage(query, {"jon", "other"}) == pytest.approx(1 / 9)
    assert coverage({}, {"x"}) is None
    with pytest.raises(ValueError, match="IDF of 'a'"):
        coverage({"a": math.nan, "b": 1.0}, {"a"})


@given(st.one_of(st.none(), st.floats(0.0, 1.0)), st.floats(0.0, 1.0), st.floats(0.0, 5.0))
def test_coverage_weight(covered: float | None, other: float, gain: float) -> None:
    got = coverage_weight(covered, gain)
    if covered is None or gain == 0:
        assert got == 1.0
        return
    assert got == pytest.approx(max((gain * covered) ** 2, MIN_SHARE))
    # a turn holding more of the query never votes less
    if other >= covered:
        assert coverage_weight(other, gain) >= got
    with pytest.raises(ValueError, match="coverage gain"):
        coverage_weight(covered, -1.0)


def test_coverage_weight_is_a_soft_and() -> None:
    # at the default gain, half the query votes as the fixed weight, all of it four times,
    # a quarter a quarter, nothing at the floor
    assert coverage_weight(0.5, 2.0) == pytest.approx(1.0)
    assert coverage_weight(1.0, 2.0) == pytest.approx(4.0)
    assert coverage_weight(0.25, 2.0) == pytest.approx(0.25)
    assert coverage_weight(0.0, 2.0) == MIN_SHARE


class _Topics:
    """A stand-in for a semantic model: texts about the same topic get the same direction."""

    name, dim = "topics-4", 4
    _TOPICS: ClassVar[dict[str, int]] = {"pottery": 0, "clay": 0, "ceramics": 0, "kiln": 0,
                                         "bike": 1, "tyre": 1}

    def encode(self, texts: list[str], *, batch_size: int = 64) -> np.ndarray:
        out = np.full((len(texts), self.dim), 0.05, np.float32)
        for i, text in enumerate(texts):
            for word, topic in self._TOPICS.items():
                if word in text.lower():
                    out[i, topic] += 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _weekend_lake(tmp_path: Path, first: list[tuple[str, str, str]], query: str
                  ) -> Callable[[float], list[str]]:
    """A lake of the ``first`` turns (conversation, prompt, answer) and five turns that share
    only the word "weekend" with the query; returns the conversations of the query's top four
    at a coverage gain."""
    settings = Settings(lake=tmp_path / "lake", embedding_model="topics-4")
    records = [make_record(i, conversation=c, prompt=p, answer=a)
               for i, (c, p, a) in enumerate(first)]
    records += [make_record(i, conversation=f"c-{i}", prompt=f"the weekend plan number {i}",
                            answer="the bike tyre is flat", at=BASE_TIME)
                for i in range(len(first), len(first) + 5)]
    embedder = _Topics()
    run_ingest(settings, [write_jsonl(tmp_path / "in.jsonl", records)], embedder=embedder)
    service = SearchService(LakeStore(settings.lake), embedder=embedder)

    def order(gain: float) -> list[str]:
        result = service.search(SearchRequest(
            query, Principal("acme", "u-ana"), k=4, recency_weight=0.0, min_relevance=0.0,
            fusion=FusionSettings(coverage_gain=gain)))
        return [h.conversation_id for h in result.hits]

    return order


def test_a_reworded_query_follows_the_dense_arm(tmp_path: Path) -> None:
    # The query names the topic in words the history never used; the lexical arm only finds
    # the turns that share its incidental word "weekend".
    order = _weekend_lake(tmp_path, [("c-pots", "we made clay pots at the kiln",
                                      "the pottery class sounds lovely")],
                          "ceramics workshop last weekend")
    assert order(0.0)[0] != "c-pots"  # fixed weights: the lexical arm's incidental matches win
    assert order(2.0)[0] == "c-pots"


def test_each_lexical_turn_votes_by_the_share_of_the_query_it_holds(tmp_path: Path) -> None:
    # One turn holds the whole query; five others share only its commonest word. A weight
    # read off the best turn alone would let those five outvote the dense arm's second turn.
    order = _weekend_lake(tmp_path, [("c-full", "ceramics kiln workshop weekend", "noted"),
                                     ("c-pots", "we made clay pots",
                                      "the pottery class sounds lovely")],
                          "ceramics kiln workshop weekend")
    assert order(0.0)[0] == "c-full" and order(0.0)[1] != "c-pots"
    assert order(2.0)[:2] == ["c-full", "c-pots"]


def test_coverage_gain_must_be_a_finite_non_negative_number(hashing_settings: Settings) -> None:
    from lake.errors import QueryError

    service = SearchService(LakeStore(hashing_settings.lake))
    with pytest.raises(QueryError, match="coverage gain"):
        service.search(SearchRequest("x", Principal("acme", "u-ana"),
                                     fusion=FusionSettings(coverage_gain=-1.0)))


def test_a_turn_holds_a_code_stem_it_writes_in_another_spelling() -> None:
    texts = ["what broke in INC-3147?", "INC-3148 broke too", "closing inc 3147", "INC3147"]
    codes = Query.of("what broke in INC3147").code_words
    assert turn_stems(["broke", "inc3147"], texts, codes) == [
        frozenset({"broke", "inc3147"}), frozenset({"broke"}), frozenset({"inc3147"}),
        frozenset({"inc3147"})]
    # and the other way round: "INC3147" makes "inc3147", yet holds the "inc" and "3147" of
    # a query writing the code with its separator (the near miss holds "inc" alone)
    assert turn_stems(["broke", "inc", "3147"], texts, Query.of("broke INC-3147").code_words) == [
        frozenset({"broke", "inc", "3147"}), frozenset({"broke", "inc"}),
        frozenset({"inc", "3147"}), frozenset({"inc", "3147"})]
    # without a code word, the stems its words make
    assert turn_stems(["broke"], texts, Query.of("broke").code_words) == \
        [frozenset({"broke"})] * 2 + [frozenset()] * 2
    assert turn_stems([], texts) == [frozenset()] * 4
