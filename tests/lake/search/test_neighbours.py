"""Neighbour smoothing as pure functions, each checked against a plain version."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lake.errors import QueryError
from lake.search.fusion import FusedIds
from lake.search.neighbours import (
    NEIGHBOUR_RELEVANCE_SHARE,
    check_neighbour_weight,
    neighbour_relevance,
    neighbour_support,
    positions_of,
    smoothed,
)


@st.composite
def fused_lists(draw: st.DrawFn) -> tuple[FusedIds, list[int], list[int]]:
    """A fused list (values falling) with, per turn, neighbour ids that may or may not be
    fused turns themselves."""
    n = draw(st.integers(0, 12))
    turns = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n, unique=True))
    values = sorted(draw(st.lists(st.sampled_from([0.0, 0.01, 0.02, 0.5, 1.0, 1.5]),
                                  min_size=n, max_size=n)), reverse=True)
    ids = st.one_of(st.just(-1), st.integers(0, 40))
    previous = draw(st.lists(ids, min_size=n, max_size=n))
    following = draw(st.lists(ids, min_size=n, max_size=n))
    ranks = np.arange(1, n + 1, dtype=np.int64).reshape(1, n)
    rows = np.arange(n, dtype=np.int64).reshape(1, n)
    fused = FusedIds(np.array(turns, np.int64), np.array(values), ("lexical",), ranks, rows)
    return fused, previous, following


def _plain_support(values: list[float], previous: list[int], following: list[int]
                   ) -> list[float]:
    return [max([0.0] + [values[p] for p in (b, a) if p >= 0])
            for b, a in zip(previous, following, strict=True)]


@given(fused_lists())
def test_support_is_the_better_neighbour_never_below_zero(
        case: tuple[FusedIds, list[int], list[int]]) -> None:
    fused, previous, following = case
    before = positions_of(fused.turns, np.array(previous, np.int64))
    after = positions_of(fused.turns, np.array(following, np.int64))
    got = neighbour_support(fused.values, before, after)
    assert got.tolist() == _plain_support(fused.values.tolist(), before.tolist(),
                                          after.tolist())


@given(st.lists(st.integers(-3, 30), unique=True), st.lists(st.integers(-3, 30)))
def test_positions_of_matches_a_dictionary(turns: list[int], wanted: list[int]) -> None:
    place = {t: i for i, t in enumerate(turns) if t >= 0}
    got = positions_of(np.array(turns, np.int64), np.array(wanted, np.int64))
    assert got.tolist() == [place.get(w, -1) if w >= 0 else -1 for w in wanted]


@given(fused_lists(), st.sampled_from([0.0, 0.25, 0.5, 1.0]))
def test_smoothing_lifts_each_turn_by_its_neighbours_and_re_sorts(
        case: tuple[FusedIds, list[int], list[int]], weight: float) -> None:
    fused, previous, following = case
    value_of = dict(zip(fused.turns.tolist(), fused.values.tolist(), strict=True))
    expected = {}
    for t, b, a in zip(fused.turns.tolist(), previous, following, strict=True):
        # a turn with no neighbour at all is its own
        near = [value_of[t]] if b == a == -1 else [value_of[n] for n in (b, a) if n in value_of]
        expected[t] = value_of[t] + weight * max([0.0, *near])
    out = smoothed(fused, np.array(previous, np.int64), np.array(following, np.int64), weight)
    turns = out.fused.turns.tolist()
    assert sorted(turns) == sorted(value_of)
    assert out.fused.values.tolist() == pytest.approx([expected[t] for t in turns])
    assert all(np.diff(out.fused.values) <= 0)
    # equal new values keep the fused order
    old_place = {t: i for i, t in enumerate(fused.turns.tolist())}
    for i in range(len(turns) - 1):
        if out.fused.values[i] == out.fused.values[i + 1]:
            assert old_place[turns[i]] < old_place[turns[i + 1]]
    # the columns travel with their turn
    for j, t in enumerate(turns):
        assert out.fused.rows[0, j] == fused.rows[0, old_place[t]]
    # neighbour positions point at the same neighbour turns, now in the new order
    neighbours = {t: (b, a) for t, b, a in zip(fused.turns.tolist(), previous, following,
                                              strict=True)}
    for j, t in enumerate(turns):
        for got, wanted in zip((out.previous[j], out.following[j]), neighbours[t],
                               strict=True):
            assert (turns[got] if got >= 0 else None) == (wanted if wanted in value_of
                                                          else None)
    if weight == 0:
        assert turns == fused.turns.tolist()


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12), st.data())
def test_neighbour_relevance_never_lowers_and_never_exceeds_the_best(
        relevances: list[float], data: st.DataObject) -> None:
    n = len(relevances)
    where = st.lists(st.integers(-1, n - 1), min_size=n, max_size=n)
    before, after = np.array(data.draw(where)), np.array(data.draw(where))
    got = neighbour_relevance(np.array(relevances), before, after)
    assert all(g >= r for g, r in zip(got, relevances, strict=True))
    assert max(got) <= max(relevances)
    for j, g in enumerate(got):
        near = [relevances[p] for p in (before[j], after[j]) if p >= 0]
        assert g == max([relevances[j], *(NEIGHBOUR_RELEVANCE_SHARE * r for r in near)])


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf])
def test_a_bad_neighbour_weight_is_refused_by_name(bad: float) -> None:
    with pytest.raises(QueryError, match="neighbour weight"):
        check_neighbour_weight(bad)


@given(fused_lists(), st.data())
def test_a_turn_that_does_not_lend_lifts_no_neighbour_but_is_still_lifted(
        case: tuple[FusedIds, list[int], list[int]], data: st.DataObject) -> None:
    fused, previous, following = case
    lends = data.draw(st.lists(st.booleans(), min_size=fused.turns.size,
                               max_size=fused.turns.size))
    got = smoothed(fused, np.array(previous, np.int64), np.array(following, np.int64), 0.5,
                   lends=np.array(lends, bool))
    # the plain version: support from neighbours that are fused and lend, or the turn's own
    # value when it has no neighbour at all
    place = {t: i for i, t in enumerate(fused.turns.tolist())}
    values = fused.values.tolist()
    expected = {}
    for j, (turn, b, a) in enumerate(zip(fused.turns.tolist(), previous, following,
                                         strict=True)):
        lenders = [j] if b == a == -1 else [place[n] for n in (b, a)
                                             if n in place and lends[place[n]]]
        expected[turn] = values[j] + 0.5 * max([0.0] + [values[i] for i in lenders])
    assert dict(zip(got.fused.turns.tolist(), got.fused.values.tolist(), strict=True)) \
        == pytest.approx(expected)
    if all(lends):
        plain = smoothed(fused, np.array(previous, np.int64), np.array(following, np.int64),
                         0.5)
        assert got.fused.turns.tolist() == plain.fused.turns.tolist()


def test_lending_marks_must_match_the_turns() -> None:
    fused = FusedIds(np.array([1, 2]), np.array([1.0, 0.5]), ("lexical",),
                     np.array([[1, 2]]), np.array([[0, 1]]))
    with pytest.raises(ValueError, match="1 lending marks for 2 turns"):
        smoothed(fused, np.array([-1, 1]), np.array([2, -1]), 0.5, lends=np.array([True]))
