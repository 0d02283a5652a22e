"""Tests for lake.search.fusion: collapsing, weighted RRF, score-aware fusion, recency."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lake.errors import QueryError
from lake.search.fusion import (
    DEFAULT_K,
    FusedTurn,
    GeneratorHit,
    RankedRow,
    collapse_to_turns,
    fuse,
    fuse_ids,
    recency_lift,
)
from lake.search.request import FusionSettings

HALF_LIFE = 7 * 24 * 3600.0

DAY = 86400.0


def rows(generator: str, *items: tuple[str, float]) -> list[RankedRow]:
    """Best-first rows of one generator; turn ids become turn_key ('c', id)."""
    return [
        RankedRow(row_key=f"{generator}:{i}", turn_key=("c", turn), score=score)
        for i, (turn, score) in enumerate(items)
    ]


def weighted_rrf(lists: dict[str, list[RankedRow]], weights: dict[str, float] | None = None,
                 k: int = DEFAULT_K) -> list[FusedTurn]:
    """Plain weighted RRF: fuse's "rrf" method."""
    return fuse(lists, weights, k, "rrf")


def test_search_uses_the_one_rrf_k() -> None:
    assert FusionSettings().k == DEFAULT_K


def by_turn(fused: Sequence[FusedTurn]) -> dict[str, float]:
    """Turn id -> fused value."""
    return {f.turn_key[1]: f.rrf for f in fused}


# --- hypothesis strategies -------------------------------------------------------------------

GENERATORS = ("lexical", "semantic", "trigram")
turn_ids = st.sampled_from("ABCDEFG")


@st.composite
def generator_lists(draw: st.DrawFn) -> dict[str, list[RankedRow]]:
    """1-3 generators, each with a best-first list that may hold several rows per turn."""
    names = draw(st.lists(st.sampled_from(GENERATORS), min_size=1, max_size=3, unique=True))
    out: dict[str, list[RankedRow]] = {}
    for name in names:
        turns = draw(st.lists(turn_ids, max_size=10))
        scores = sorted(
            draw(
                st.lists(
                    st.floats(-10, 10, allow_nan=False),
                    min_size=len(turns),
                    max_size=len(turns),
                )
            ),
            reverse=True,
        )
        out[name] = [
            RankedRow(f"{name}:{i}", ("c", t), s)
            for i, (t, s) in enumerate(zip(turns, scores, strict=True))
        ]
    return out


# --- collapse_to_turns -------------------------------------------------------------------------


def test_collapse_keeps_first_row_per_turn_in_order() -> None:
    listed = rows("g", ("A", 9.0), ("B", 8.0), ("A", 7.0), ("C", 6.0), ("B", 5.0))
    collapsed = collapse_to_turns(listed)
    assert [t for t, _ in collapsed] == [("c", "A"), ("c", "B"), ("c", "C")]
    assert [r.row_key for _, r in collapsed] == ["g:0", "g:1", "g:3"]


def test_collapse_keeps_best_not_newest_row() -> None:
    # the newest row of turn A is last in the list; the best one is first and must win
    listed = rows("g", ("A", 0.9), ("B", 0.8), ("A", 0.1))
    assert collapse_to_turns(listed)[0][1].score == 0.9


@given(st.lists(turn_ids, max_size=20))
def test_collapse_property(turns: list[str]) -> None:
    listed = [RankedRow(f"r{i}", ("c", t), float(-i)) for i, t in enumerate(turns)]
    collapsed = collapse_to_turns(listed)
    expected_order = list(dict.fromkeys(("c", t) for t in turns))
    assert [t for t, _ in collapsed] == expected_order
    for turn, row in collapsed:
        assert row == next(r for r in listed if r.turn_key == turn)


def test_collapse_rejects_bad_rows() -> None:
    with pytest.raises(QueryError, match="non-finite"):
        collapse_to_turns([RankedRow("r", ("c", "A"), math.nan)])
    with pytest.raises(QueryError, match="two turns"):
        collapse_to_turns([RankedRow("r", ("c", "A"), 1.0), RankedRow("r", ("c", "B"), 0.5)])


# --- weighted_rrf ------------------------------------------------------------------------------


def test_rrf_hand_computed() -> None:
    lists = {
        "lexical": rows("lex", ("A", 12.0), ("B", 7.0), ("A", 3.0)),
        "semantic": rows("sem", ("B", 0.8), ("C", 0.7)),
    }
    fused = weighted_rrf(lists)
    assert [f.turn_key[1] for f in fused] == ["B", "A", "C"]
    assert by_turn(fused) == pytest.approx({"A": 1 / 61, "B": 1 / 62 + 1 / 61, "C": 1 / 62})
    b = fused[0]
    assert b.hits == {
        "lexical": GeneratorHit(row_key="lex:1", rank=2, score=7.0),
        "semantic": GeneratorHit(row_key="sem:0", rank=1, score=0.8),
    }


def test_rrf_weights_and_k() -> None:
    lists = {
        "lexical": rows("lex", ("A", 12.0), ("B", 7.0)),
        "semantic": rows("sem", ("B", 0.8)),
    }
    fused = by_turn(weighted_rrf(lists, {"lexical": 3.0, "unused": 5.0}, k=10))
    # semantic is missing from weights and weighs 1.0; "unused" has no list and is ignored
    assert fused == pytest.approx({"A": 3 / 11, "B": 3 / 12 + 1 / 11})


def test_rrf_ties_break_by_turn_key() -> None:
    lists = {"lexical": rows("lex", ("B", 1.0)), "semantic": rows("sem", ("A", 1.0))}
    assert [f.turn_key[1] for f in weighted_rrf(lists)] == ["A", "B"]


def test_rrf_empty_inputs() -> None:
    assert weighted_rrf({}) == []
    assert weighted_rrf({"lexical": []}) == []


@pytest.mark.parametrize("bad", [math.nan, -0.5, math.inf])
def test_rrf_rejects_bad_weights(bad: float) -> None:
    with pytest.raises(QueryError, match="lexical"):
        weighted_rrf({"lexical": rows("lex", ("A", 1.0))}, {"lexical": bad})


@pytest.mark.parametrize("bad", [-1, True])
def test_rrf_rejects_bad_k(bad: int) -> None:
    with pytest.raises(QueryError, match="k must be"):
        weighted_rrf({"lexical": rows("lex", ("A", 1.0))}, k=bad)


def test_rrf_names_generator_with_bad_rows() -> None:
    with pytest.raises(QueryError, match="trigram"):
        weighted_rrf({"trigram": [RankedRow("r", ("c", "A"), math.inf)]})


@given(generator_lists(), st.data())
def test_rrf_monotonic_in_rank(lists: dict[str, list[RankedRow]], data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(lists)))
    listed = lists[name]
    if not listed:
        return
    source = data.draw(st.integers(0, len(listed) - 1))
    target = data.draw(st.integers(0, source))
    moved_row = listed[source]
    improved = [*listed[:source], *listed[source + 1 :]]
    improved.insert(target, moved_row)
    before = by_turn(weighted_rrf(lists))
    after = by_turn(weighted_rrf({**lists, name: improved}))
    turn = moved_row.turn_key[1]
    assert after[turn] >= before[turn]


@pytest.mark.parametrize("method", ["rrf", "rrf_score"])
@given(lists=generator_lists(), data=st.data())
def test_zero_weight_removes_generator(
    method: str, lists: dict[str, list[RankedRow]], data: st.DataObject
) -> None:
    dropped = data.draw(st.sampled_from(sorted(lists)))
    weights = {name: data.draw(st.floats(0.1, 3.0)) for name in lists}
    weights[dropped] = 0.0
    rest = {name: listed for name, listed in lists.items() if name != dropped}
    assert fuse(lists, weights, method=method) == fuse(rest, weights, method=method)  # type: ignore[arg-type]
    if method == "rrf":
        assert weighted_rrf(lists, weights) == weighted_rrf(rest, weights)


@given(generator_lists())
def test_fuse_rrf_is_weighted_rrf(lists: dict[str, list[RankedRow]]) -> None:
    assert fuse(lists, method="rrf") == weighted_rrf(lists)
    assert fuse(lists, method="rrf_score", score_factor=0.0) == weighted_rrf(lists)


# --- fuse: score-aware variants ----------------------------------------------------------------


def test_rrf_score_zscore_hand_computed() -> None:
    lists = {
        "lexical": rows("lex", ("A", 10.0), ("B", 4.0), ("C", 1.0)),
        "semantic": rows("sem", ("B", 0.5), ("C", 0.5)),  # no spread: contributes no score term
    }
    # lexical mean 5, population std sqrt(14); only A is above the mean
    z_a = 5 / math.sqrt(14)
    fused = by_turn(fuse(lists, method="rrf_score", zscore_floor=0.0))
    assert fused == pytest.approx(
        {"A": 1 / 61 + z_a / 61, "B": 1 / 62 + 1 / 61, "C": 1 / 63 + 1 / 62}
    )
    floored = by_turn(fuse(lists, method="rrf_score"))  # default floor: 1 deviation
    assert floored["A"] == pytest.approx(1 / 61 + (z_a - 1) / 61)
    assert floored["B"] == pytest.approx(1 / 62 + 1 / 61)
    scaled = by_turn(
        fuse(lists, {"lexical": 2.0}, method="rrf_score", score_factor=0.5, k=10, zscore_floor=0)
    )
    assert scaled["A"] == pytest.approx(2 * (1 / 11 + 0.5 * z_a / 11))


def _consensus_scenario(lexical_top: float) -> dict[str, list[RankedRow]]:
    """Turn A tops lexical only; turn B is second in all three evenly spread lists of 30."""
    filler = [f"x{i}" for i in range(40)]
    return {
        "lexical": rows(
            "lex",
            ("A", lexical_top),
            ("B", 6.0),
            *[(t, 5.9 - i * 0.2) for i, t in enumerate(filler[:28])],
        ),
        "semantic": rows(
            "sem",
            ("P", 0.61),
            ("B", 0.60),
            *[(t, 0.59 - i * 0.01) for i, t in enumerate(filler[10:38])],
        ),
        "trigram": rows(
            "tri",
            ("Q", 0.9),
            ("B", 0.88),
            *[(t, 0.86 - i * 0.02) for i, t in enumerate(filler[5:33])],
        ),
    }


def test_rrf_score_keeps_far_ahead_lexical_hit_on_top() -> None:
    lists = _consensus_scenario(lexical_top=30.0)
    assert weighted_rrf(lists)[0].turn_key[1] == "B"
    assert fuse(lists, method="rrf_score")[0].turn_key[1] == "A"


def test_rrf_score_keeps_consensus_when_lexical_top_is_not_ahead() -> None:
    lists = _consensus_scenario(lexical_top=6.1)
    assert fuse(lists, method="rrf_score")[0].turn_key[1] == "B"


def test_equal_scores_add_no_bonus_and_rank_order_decides() -> None:
    # all-equal scores normalize to 0 under zscore, so rank order must decide
    lists = {"lexical": rows("lex", ("C", 1.0), ("A", 1.0), ("B", 1.0))}
    assert [f.turn_key[1] for f in fuse(lists, method="rrf_score")] == ["C", "A", "B"]


def test_fuse_handles_huge_scores() -> None:
    lists = {"lexical": rows("lex", ("A", 1e308), ("B", -1e308), ("C", 0.0))}
    fused = fuse(lists, method="rrf_score")
    assert all(math.isfinite(f.rrf) for f in fused)
    assert fused[0].turn_key[1] == "A"


def test_fuse_rejects_bad_options() -> None:
    lists = {"lexical": rows("lex", ("A", 1.0))}
    with pytest.raises(QueryError, match="method"):
        fuse(lists, method="borda")  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="use 'rrf' or 'rrf_score'"):
        fuse(lists, method="score")  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="score_factor"):
        fuse(lists, method="rrf_score", score_factor=-1.0)
    with pytest.raises(QueryError, match="zscore_floor"):
        fuse(lists, method="rrf_score", zscore_floor=math.nan)


# --- recency -----------------------------------------------------------------------------------


def test_recency_lift_hand_computed() -> None:
    assert recency_lift(0.0, 7 * DAY, 1.0) == 2.0
    assert recency_lift(7 * DAY, 7 * DAY, 1.0) == 1.5
    assert recency_lift(14 * DAY, 7 * DAY, 2.0) == pytest.approx(1.5)
    assert recency_lift(-5 * DAY, 7 * DAY, 1.0) == 2.0  # future turns count as age 0
    assert recency_lift(3 * DAY, 0.0, 1.0) == 1.0
    assert recency_lift(3 * DAY, -1.0, 1.0) == 1.0
    assert recency_lift(3 * DAY, 7 * DAY, 0.0) == 1.0
    assert recency_lift(math.inf, 7 * DAY, 1.0) == 1.0
    assert HALF_LIFE == 7 * DAY


@pytest.mark.parametrize(
    ("age", "half_life", "weight", "match"),
    [
        (math.nan, DAY, 1.0, "age"),
        (DAY, math.nan, 1.0, "half_life"),
        (DAY, DAY, -1.0, "weight"),
        (DAY, DAY, math.nan, "weight"),
        (DAY, DAY, math.inf, "weight"),
    ],
)
def test_recency_lift_rejects(age: float, half_life: float, weight: float, match: str) -> None:
    with pytest.raises(QueryError, match=match):
        recency_lift(age, half_life, weight)


ages = st.floats(-1e7, 1e9, allow_nan=False)
half_lives = st.floats(1.0, 1e8)
lift_weights = st.floats(0.0, 10.0)


@given(ages, half_lives, lift_weights)
def test_lift_bounds(age: float, half_life: float, weight: float) -> None:
    assert 1.0 <= recency_lift(age, half_life, weight) <= 1.0 + weight


@given(st.floats(0.0, 20.0), half_lives, st.floats(0.01, 10.0))
def test_lift_halves_each_half_life(periods: float, half_life: float, weight: float) -> None:
    # ages up to 20 half-lives keep the decay term far above 1 - lift rounding (1e-16)
    age = periods * half_life
    now = recency_lift(age, half_life, weight) - 1.0
    later = recency_lift(age + half_life, half_life, weight) - 1.0
    assert later == pytest.approx(now / 2, rel=1e-6)


@given(ages, ages, half_lives, lift_weights)
def test_lift_decreases_with_age(a: float, b: float, half_life: float, weight: float) -> None:
    younger, older = sorted((a, b))
    assert recency_lift(younger, half_life, weight) >= recency_lift(older, half_life, weight)


# --- fuse against its formulas; fuse_ids against fuse --------------------------------------

tied_scores = st.sampled_from([0.5, 1.0, 2.0])  # few values: equal fused values are common


@st.composite
def tied_lists(draw: st.DrawFn) -> dict[str, list[RankedRow]]:
    """Lists whose scores repeat, so that fused values tie and the tie order is exercised."""
    out: dict[str, list[RankedRow]] = {}
    for name in draw(st.lists(st.sampled_from(GENERATORS), min_size=1, max_size=3, unique=True)):
        turns = draw(st.lists(turn_ids, max_size=8))
        scores = sorted(draw(st.lists(tied_scores, min_size=len(turns), max_size=len(turns))),
                        reverse=True)
        out[name] = [RankedRow(f"{name}:{i}", ("c", t), s)
                     for i, (t, s) in enumerate(zip(turns, scores, strict=True))]
    return out


def reference_normalize(scores: list[float]) -> list[float]:
    """fuse's documented floored z-scores (floor 1), one score at a time."""
    if not scores:
        return []
    magnitude = max(abs(s) for s in scores)
    if magnitude == 0:
        return [0.0] * len(scores)
    scaled = [s / magnitude for s in scores]
    mean = math.fsum(scaled) / len(scaled)
    std = math.sqrt(math.fsum((s - mean) ** 2 for s in scaled) / len(scaled))
    return [max(0.0, (s - mean) / std - 1.0) if std > 1e-12 else 0.0 for s in scaled]


def reference_fuse(lists: dict[str, list[RankedRow]], weights: dict[str, float], k: int,
                   method: str, factor: float,
                   turn_weights: dict[str, dict[tuple[str, str], float]] | None = None,
                   ) -> list[tuple[str, float]]:
    """fuse's documented formulas, one turn at a time: (turn id, fused value), best first."""
    rrf: dict[tuple[str, str], float] = {}
    sums: dict[tuple[str, str], float] = {}
    for name in sorted(lists):
        w = weights.get(name, 1.0)
        if w == 0:
            continue
        collapsed = collapse_to_turns(lists[name])
        normalized = reference_normalize([r.score for _, r in collapsed])
        for i, (turn, _) in enumerate(collapsed):
            own = w * (turn_weights or {}).get(name, {}).get(turn, 1.0)
            rrf[turn] = rrf.get(turn, 0.0) + own / (k + i + 1)
            sums[turn] = sums.get(turn, 0.0) + own * normalized[i]
    value = {t: rrf[t] if method == "rrf" else rrf[t] + factor / (k + 1) * sums.get(t, 0.0)
             for t in rrf}
    order = sorted(rrf, key=lambda t: (-value[t], -rrf[t], t))
    return [(t[1], value[t]) for t in order]


turn_multipliers = st.dictionaries(
    st.sampled_from(GENERATORS),
    st.dictionaries(turn_ids.map(lambda t: ("c", t)), st.sampled_from([0.0, 0.01, 0.25, 1.0, 4.0])))


@given(tied_lists(), st.sampled_from(["rrf", "rrf_score"]),
       st.dictionaries(st.sampled_from(GENERATORS), st.sampled_from([0.0, 0.5, 1.0, 2.0])),
       st.sampled_from([0, 1, 60]), st.one_of(st.none(), turn_multipliers))
def test_fuse_follows_its_formulas_exactly(lists: dict[str, list[RankedRow]], method: str,
                                           weights: dict[str, float], k: int,
                                           turn_weights: dict[str, dict[tuple[str, str], float]]
                                           | None) -> None:
    fused = fuse(lists, weights, k, method, turn_weights=turn_weights)  # type: ignore[arg-type]
    expected = reference_fuse(lists, weights, k, method, 1.0, turn_weights)
    assert [(f.turn_key[1], f.rrf) for f in fused] == expected


@given(tied_lists(), st.sampled_from(["rrf", "rrf_score"]),
       st.one_of(st.none(), turn_multipliers))
def test_fuse_ids_equals_fuse_on_row_lists(lists: dict[str, list[RankedRow]], method: str,
                                           turn_weights: dict[str, dict[tuple[str, str], float]]
                                           | None) -> None:
    # ids numbered against the key order, so only tie_key can put ties in fuse's order
    number = {t: 100 - i for i, t in enumerate("ABCDEFG")}
    key_of = {n: ("c", t) for t, n in number.items()}
    arrays = {g: (np.array([number[r.turn_key[1]] for r in rs], np.int64),
                  np.array([r.score for r in rs])) for g, rs in lists.items()}
    # every row of a turn carries the turn's multiplier; fuse_ids reads its first row's
    row_weights = {g: np.array([turn_weights[g].get(r.turn_key, 1.0) for r in lists[g]])
                   for g in lists if turn_weights and g in turn_weights}
    result = fuse_ids(arrays, None, 60, method, tie_key=key_of.__getitem__,  # type: ignore[arg-type]
                      row_weights=row_weights)
    expected = fuse(lists, None, 60, method, turn_weights=turn_weights)  # type: ignore[arg-type]
    assert [key_of[t] for t in result.turns.tolist()] == [f.turn_key for f in expected]
    assert result.values.tolist() == [f.rrf for f in expected]
    for j, f in enumerate(expected):
        for g, name in enumerate(result.names):
            hit = f.hits.get(name)
            assert result.ranks[g, j] == (hit.rank if hit else 0)
            row = int(result.rows[g, j])
            assert (lists[name][row].row_key if row >= 0 else None) == \
                (hit.row_key if hit else None)


def test_fuse_ids_without_tie_key_orders_ties_by_id() -> None:
    result = fuse_ids({"lexical": (np.array([7]), np.array([1.0])),
                       "trigram": (np.array([3]), np.array([1.0]))})
    assert result.turns.tolist() == [3, 7]


def test_fuse_ids_rejects_bad_lists() -> None:
    with pytest.raises(QueryError, match="2 turn ids but 1 scores"):
        fuse_ids({"lexical": (np.array([1, 2]), np.array([1.0]))})
    with pytest.raises(QueryError, match="'trigram': row at position 1 has a non-finite"):
        fuse_ids({"trigram": (np.array([1, 2]), np.array([1.0, math.inf]))})
    with pytest.raises(QueryError, match="unknown fusion method"):
        fuse_ids({}, method="best")  # type: ignore[arg-type]
    one = {"lexical": (np.array([1, 2]), np.array([2.0, 1.0]))}
    with pytest.raises(QueryError, match="'lexical': 1 row weights for 2 rows"):
        fuse_ids(one, row_weights={"lexical": np.array([1.0])})
    with pytest.raises(QueryError, match="row at position 1 must be finite and >= 0"):
        fuse_ids(one, row_weights={"lexical": np.array([1.0, -0.5])})
    with pytest.raises(QueryError, match="row at position 0 must be finite and >= 0"):
        fuse_ids(one, row_weights={"lexical": np.array([math.nan, 1.0])})


def test_a_turn_weight_moves_only_that_turns_vote() -> None:
    rows = [RankedRow("r1", ("c", "A"), 3.0), RankedRow("r2", ("c", "B"), 2.0)]
    plain = fuse({"lexical": rows}, k=60)
    assert [f.turn_key[1] for f in plain] == ["A", "B"]
    damped = fuse({"lexical": rows}, k=60, turn_weights={"lexical": {("c", "A"): 0.25}})
    assert [f.turn_key[1] for f in damped] == ["B", "A"]
    assert damped[0].rrf == plain[1].rrf and damped[1].rrf == 0.25 / 61


def test_fuse_ids_of_nothing_is_empty() -> None:
    result = fuse_ids({"lexical": (np.zeros(0, np.int64), np.zeros(0))})
    assert result.turns.size == 0 and result.ranks.shape == (1, 0)
