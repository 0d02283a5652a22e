"""Rank fusion for hybrid search: collapse rows to turns, fuse the turn lists, lift by recency.

Each candidate generator (semantic, lexical, trigram) returns rows ranked best first. A turn may
own several rows (prompt, completion, summary ...), so every list is first collapsed to turns,
keeping each turn's *best* row (its first appearance), and ranks are counted over those turn lists.

Standard weighted reciprocal-rank fusion (:func:`fuse` with ``method="rrf"``)::

    rrf(t) = Σ_g  w_g / (k + rank_g(t))          summed over generators g whose list holds t

Recency is not a fourth list; it multiplies the fused value once (:func:`recency_lift`)::

    final(t) = fused(t) × (1 + w × 0.5 ** (age(t) / half_life))

Search chooses among the three methods of :func:`fuse` (``FusionSettings.method``); the
score-aware ones exist because plain RRF lets a weak list (a dense retriever with flat
similarities) drag a far-ahead lexical hit below turns that are mediocre everywhere.
:func:`fuse_ids` is the one implementation (what search calls, over integer turn ids);
:func:`fuse` is the same over rows named by keys, the readable form the tests hold it to.
``DEFAULT_K`` here is the RRF k search uses (``FusionSettings.k`` defaults to it).
Everything here is pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from lake.errors import QueryError
from lake.search.defaults import DEFAULT_K as DEFAULT_K
from lake.search.defaults import FusionMethod as FusionMethod

__all__ = [
    "DEFAULT_K",
    "FusedIds",
    "FusedTurn",
    "FusionMethod",
    "GeneratorHit",
    "RankedRow",
    "collapse_to_turns",
    "fuse",
    "fuse_ids",
    "recency_lift",
]


TurnKey = tuple[str, str]
IdList = tuple[np.ndarray, np.ndarray]  # (turn ids, scores), best row first


class RankedRow(NamedTuple):
    """One generator's hit on one row; ``turn_key`` is ``(conversation_id, turn_id)``."""

    row_key: str
    turn_key: TurnKey
    score: float


class GeneratorHit(NamedTuple):
    """A turn's best row in one generator; ``rank`` is 1-based within that generator's turn list."""

    row_key: str
    rank: int
    score: float


class FusedTurn(NamedTuple):
    """One fused turn.

    ``rrf`` is the fused value before recency: the chosen method's value (the weighted RRF sum
    for ``"rrf"``). ``hits`` maps generator name to the turn's
    best row in that generator (only generators with a non-zero weight appear).
    """

    turn_key: TurnKey
    rrf: float
    hits: Mapping[str, GeneratorHit]


def collapse_to_turns(rows: Sequence[RankedRow]) -> list[tuple[TurnKey, RankedRow]]:
    """Collapse best-first rows to one entry per turn, keeping the turn's first (best) row.

    The result is ordered by each turn's best row, so position ``i`` (0-based) is rank ``i + 1``
    in the turn list. Raises :class:`QueryError` when a score is not finite or when one row key
    is attributed to two different turns.
    """
    best: dict[TurnKey, RankedRow] = {}
    owner: dict[str, TurnKey] = {}
    for position, row in enumerate(rows):
        if not math.isfinite(row.score):
            raise QueryError(
                f"row {row.row_key!r} at position {position} has a non-finite score {row.score!r}"
            )
        seen = owner.setdefault(row.row_key, row.turn_key)
        if seen != row.turn_key:
            raise QueryError(
                f"row {row.row_key!r} is listed under two turns: {seen!r} and {row.turn_key!r}"
            )
        # dicts keep insertion order, so the first (best) row fixes the turn's position
        best.setdefault(row.turn_key, row)
    return list(best.items())


def fuse(
    lists: Mapping[str, Sequence[RankedRow]],
    weights: Mapping[str, float] | None = None,
    k: int = DEFAULT_K,
    method: FusionMethod = "rrf",
    *,
    score_factor: float = 1.0,
    zscore_floor: float = 1.0,
    turn_weights: Mapping[str, Mapping[TurnKey, float]] | None = None,
) -> list[FusedTurn]:
    """Fuse the generators' turn lists with the chosen ``method``; the value lands in ``rrf``.

    ``rank_g(t)`` is the 1-based position of turn ``t`` in generator ``g``'s list after
    :func:`collapse_to_turns`; generators whose list lacks ``t`` add nothing; missing weights
    default to 1.0, names not in ``lists`` are ignored; a generator of weight 0 is dropped
    entirely, so the result equals the result without that list. With ``n_g(t)`` the
    normalized score of turn ``t``'s best row in generator ``g`` (see below) and
    ``β = score_factor``:

    * ``"rrf"``:       ``F(t) = Σ_g w_g / (k + rank_g(t))`` (standard weighted RRF).
    * ``"rrf_score"``: ``F(t) = Σ_g w_g · (1 / (k + rank_g(t)) + β · n_g(t) / (k + 1))``.
      Dividing by ``k + 1`` puts the score term in rank-1 units: with ``β = 1`` a turn whose
      normalized score is 1 earns as much again as a rank-1 hit. ``β = 0`` gives plain RRF.

    The normalization, computed per generator over its collapsed turn list (one score per
    turn), is a floored z-score: ``n = max(0, (s - μ_g) / σ_g - zscore_floor)`` with the list's
    population mean and standard deviation; ``n = 0`` when ``σ_g = 0``. Only outliers, hits
    more than ``zscore_floor`` deviations above their list's mean, earn a bonus, so a far-
    ahead lexical top hit gains a lot while an evenly spread list (whose z-scores stay below
    about √3) adds little to its mid-ranked turns. Hits below the floor add 0, never a
    penalty. ``zscore_floor = 0`` rewards every above-mean hit.

    ``turn_weights[g][t]``, where given, multiplies ``w_g`` for turn ``t`` alone (a turn
    missing from the mapping keeps ``w_g``): a generator's vote can depend on how much of the
    query each of its turns holds (lake.search.coverage).

    Sorted by ``F`` descending, then by the plain RRF part descending, then ``turn_key``.
    Raises :class:`QueryError` for an unknown method, a negative or non-integer ``k``, a
    negative or non-finite weight, turn weight or ``score_factor``, a non-finite
    ``zscore_floor``, and invalid rows (naming their generator).
    """
    _check_fusion(k, method, score_factor, zscore_floor)
    checked = _turn_lists(lists, weights)
    per_turn = turn_weights or {}
    # Number the turns, then fuse the numbers: every list is already collapsed, so each id
    # names one turn and each position one row.
    ids: dict[TurnKey, int] = {}
    keys: list[TurnKey] = []
    numbered: dict[str, IdList] = {}
    for name, _, collapsed in checked:
        turn_ids = []
        for turn, _row in collapsed:
            number = ids.get(turn)
            if number is None:
                number = ids[turn] = len(keys)
                keys.append(turn)
            turn_ids.append(number)
        numbered[name] = (np.array(turn_ids, np.int64),
                          np.array([row.score for _, row in collapsed], np.float64))
    row_weights = {name: np.array([per_turn[name].get(turn, 1.0) for turn, _ in collapsed],
                                  np.float64)
                   for name, _, collapsed in checked if name in per_turn}
    result = fuse_ids(numbered, {name: w for name, w, _ in checked}, k, method,
                      score_factor=score_factor, zscore_floor=zscore_floor,
                      tie_key=keys.__getitem__, row_weights=row_weights)
    rows = [collapsed for _, _, collapsed in checked]
    fused = []
    for j, (number, value) in enumerate(zip(result.turns.tolist(), result.values.tolist(),
                                            strict=True)):
        hits = {}
        for g, name in enumerate(result.names):
            rank = int(result.ranks[g, j])
            if rank:
                row = rows[g][int(result.rows[g, j])][1]
                hits[name] = GeneratorHit(row.row_key, rank, row.score)
        fused.append(FusedTurn(turn_key=keys[number], rrf=value, hits=hits))
    return fused


class FusedIds(NamedTuple):
    """The result of :func:`fuse_ids`: fused turns as arrays, best first.

    Column ``j`` describes turn ``turns[j]``; row ``g`` of ``ranks`` and ``rows`` describes
    generator ``names[g]`` (names sorted, weight-0 generators left out): the turn's 1-based
    rank in that generator's turn list (0 where absent) and the position of its best row in
    that generator's input (-1 where absent).
    """

    turns: np.ndarray
    values: np.ndarray
    names: tuple[str, ...]
    ranks: np.ndarray
    rows: np.ndarray


def fuse_ids(
    lists: Mapping[str, IdList],
    weights: Mapping[str, float] | None = None,
    k: int = DEFAULT_K,
    method: FusionMethod = "rrf",
    *,
    score_factor: float = 1.0,
    zscore_floor: float = 1.0,
    tie_key: Callable[[int], Any] | None = None,
    row_weights: Mapping[str, np.ndarray] | None = None,
) -> FusedIds:
    """:func:`fuse` over integer turn ids, computed column-wise.

    Each list is ``(turn ids, scores)`` of one generator's rows, best first; a turn may own
    several rows, and its first row counts (as :func:`collapse_to_turns` keeps it). Values,
    order and ranks are exactly those of :func:`fuse` on the same lists, with ``tie_key(id)``
    (turn id when None) ordering turns whose fused and plain RRF values are both equal.
    ``row_weights[g]``, where given, holds one multiplier of ``w_g`` per row of ``g``'s list
    (a turn's first row's counts, as :func:`fuse`'s ``turn_weights`` of that turn).
    Raises :class:`QueryError` for everything :func:`fuse` rejects, and for lists whose
    arrays differ in length.
    """
    _check_fusion(k, method, score_factor, zscore_floor)
    given = _checked_weights(weights)
    names: list[str] = []
    collapsed: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for name in sorted(lists):  # a fixed summation order, independent of mapping order
        w = given.get(name, 1.0)
        if w == 0:
            continue
        turns, scores = (np.asarray(a).ravel() for a in lists[name])
        if turns.size != scores.size:
            raise QueryError(f"generator {name!r}: {turns.size} turn ids but "
                             f"{scores.size} scores")
        multipliers = _row_weights(name, (row_weights or {}).get(name), turns.size)
        scores = scores.astype(np.float64, copy=False)
        bad = np.flatnonzero(~np.isfinite(scores))
        if bad.size:
            raise QueryError(f"generator {name!r}: row at position {int(bad[0])} has a "
                             f"non-finite score {float(scores[bad[0]])!r}")
        first = _first_rows(turns.astype(np.int64, copy=False))
        names.append(name)
        # each turn's own weight, w_g times its first row's multiplier
        collapsed.append((w * multipliers[first], turns[first].astype(np.int64, copy=False),
                          scores[first], first))
    every = np.concatenate([c[1] for c in collapsed]) if collapsed else np.zeros(0, np.int64)
    unique, where = _numbered(every)
    rrf = np.zeros(unique.size)
    score_sums = np.zeros(unique.size)
    ranks = np.zeros((len(names), unique.size), np.int64)
    rows = np.full((len(names), unique.size), -1, np.int64)
    start = 0
    for g, (own, turns, scores, first) in enumerate(collapsed):
        at = where[start:start + turns.size]
        start += turns.size
        rank = np.arange(1, turns.size + 1)
        # w / (k + rank) and w * n in float64, as the scalar arithmetic of the formulas does
        rrf[at] += own / (k + rank)
        if method != "rrf":
            score_sums[at] += own * _normalize(scores, zscore_floor)
        ranks[g, at] = rank
        rows[g, at] = first
    values = rrf if method == "rrf" else rrf + (score_factor / (k + 1)) * score_sums
    order = np.lexsort((-rrf, -values))  # stable: ties stay in ascending id order
    if tie_key is not None:
        order = _order_ties(order, values, rrf, unique, tie_key)
    return FusedIds(unique[order], values[order], tuple(names), ranks[:, order], rows[:, order])


# Sorting replaces np.unique below: for the few hundred ids of a search it costs a fraction.


def _runs(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A stable sorting order of ``ids`` and, along it, where each run of equal ids starts."""
    order = np.argsort(ids, kind="stable")
    ordered = ids[order]
    starts = np.ones(ordered.size, np.bool_)
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    return order, starts


def _first_rows(turns: np.ndarray) -> np.ndarray:
    """Ascending positions of each turn's first (best) row."""
    order, starts = _runs(turns)
    return np.sort(order[starts])


def _numbered(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct ``ids`` and, for each id, its position among them."""
    order, starts = _runs(ids)
    where = np.empty(ids.size, np.int64)
    where[order] = np.cumsum(starts) - 1
    return ids[order][starts], where


def _order_ties(order: np.ndarray, values: np.ndarray, rrf: np.ndarray, turns: np.ndarray,
                tie_key: Callable[[int], Any]) -> np.ndarray:
    """``order`` with each run of equal (value, rrf) re-sorted by ``tie_key`` of its turns."""
    v, r = values[order], rrf[order]
    tied = np.flatnonzero((v[1:] == v[:-1]) & (r[1:] == r[:-1]))
    if tied.size == 0:
        return order
    order = order.copy()
    # runs of consecutive tied neighbours: [run start, run end)
    breaks = np.flatnonzero(np.diff(tied) > 1)
    for a, b in zip(np.r_[tied[0], tied[breaks + 1]].tolist(),
                    (np.r_[tied[breaks], tied[-1]] + 2).tolist(), strict=True):
        run = order[a:b].tolist()
        order[a:b] = sorted(run, key=lambda i: tie_key(int(turns[i])))
    return order


def recency_lift(age_seconds: float, half_life_seconds: float, weight: float) -> float:
    """Return the multiplicative recency lift ``1 + weight × 0.5 ** (age / half_life)``.

    The lift lies in ``[1, 1 + weight]``: ``1 + weight`` at age 0, ``1 + weight / 2`` at one
    half-life, falling towards 1 with age. Negative ages (turns stamped after the query's
    reference time) count as 0. ``half_life_seconds <= 0`` or ``weight == 0`` disables the
    lift (returns 1.0); an infinite half-life never decays. Raises :class:`QueryError` for a
    NaN age or half-life, or a weight that is negative or not finite.
    """
    if math.isnan(age_seconds):
        raise QueryError("recency age_seconds is NaN")
    if math.isnan(half_life_seconds):
        raise QueryError("recency half_life_seconds is NaN")
    if not math.isfinite(weight) or weight < 0:
        raise QueryError(f"recency weight must be a finite number >= 0, got {weight!r}")
    if half_life_seconds <= 0 or weight == 0:
        return 1.0
    age = max(age_seconds, 0.0)
    return 1.0 + weight * math.pow(0.5, age / half_life_seconds)


def _check_k(k: int) -> None:
    """Reject a smoothing constant that is not a non-negative integer."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise QueryError(f"RRF constant k must be an integer >= 0, got {k!r}")


def _check_fusion(k: int, method: str, score_factor: float, zscore_floor: float) -> None:
    """Reject fusion settings that :func:`fuse` does not define."""
    _check_k(k)
    if method not in ("rrf", "rrf_score"):
        raise QueryError(f"unknown fusion method {method!r}; use 'rrf' or 'rrf_score'")
    if not math.isfinite(score_factor) or score_factor < 0:
        raise QueryError(f"score_factor must be a finite number >= 0, got {score_factor!r}")
    if not math.isfinite(zscore_floor):
        raise QueryError(f"zscore_floor must be a finite number, got {zscore_floor!r}")


def _checked_weights(weights: Mapping[str, float] | None) -> dict[str, float]:
    """The weights, each checked to be finite and >= 0."""
    given = dict(weights or {})
    for name, w in given.items():
        if not math.isfinite(w) or w < 0:
            raise QueryError(f"weight of generator {name!r} must be finite and >= 0, got {w!r}")
    return given


def _row_weights(name: str, given: np.ndarray | None, rows: int) -> np.ndarray:
    """One generator's per-row weight multipliers (all 1 when none are given), checked to
    be as many as its rows, finite and >= 0."""
    if given is None:
        return np.ones(rows)
    multipliers = np.asarray(given, np.float64).ravel()
    if multipliers.size != rows:
        raise QueryError(f"generator {name!r}: {multipliers.size} row weights for {rows} rows")
    bad = np.flatnonzero(~np.isfinite(multipliers) | (multipliers < 0))
    if bad.size:
        raise QueryError(f"generator {name!r}: the weight of the row at position "
                         f"{int(bad[0])} must be finite and >= 0, got "
                         f"{float(multipliers[bad[0]])!r}")
    return multipliers


def _turn_lists(
    lists: Mapping[str, Sequence[RankedRow]], weights: Mapping[str, float] | None
) -> list[tuple[str, float, list[tuple[TurnKey, RankedRow]]]]:
    """Validate weights and collapse every weighted list; sorted by name for stable summation."""
    given = _checked_weights(weights)
    out: list[tuple[str, float, list[tuple[TurnKey, RankedRow]]]] = []
    # a fixed summation order keeps floating-point results independent of mapping order
    for name in sorted(lists):
        w = given.get(name, 1.0)
        if w == 0:
            continue
        try:
            collapsed = collapse_to_turns(lists[name])
        except QueryError as exc:
            raise QueryError(f"generator {name!r}: {exc}") from exc
        out.append((name, w, collapsed))
    return out


def _normalize(scores: np.ndarray, zscore_floor: float) -> np.ndarray:
    """The floored z-scores of one list's scores (float64), as documented in :func:`fuse`."""
    n = scores.size
    if n == 0:
        return np.zeros(0)
    # scale-invariant; scaling to [-1, 1] first keeps squares of huge scores from overflowing
    magnitude = float(np.abs(scores).max())
    if magnitude == 0:
        return np.zeros(n)
    scaled = scores / magnitude
    # exact sums (fsum), so the mean and spread do not depend on the order of the scores
    mean = math.fsum(scaled.tolist()) / n
    deviation = scaled - mean
    std = math.sqrt(math.fsum(d ** 2 for d in deviation.tolist()) / n)
    # spreads at rounding-noise level carry no signal
    if std <= 1e-12:
        return np.zeros(n)
    return np.maximum(deviation / std - zscore_floor, 0.0)
