"""Neighbour smoothing: a turn whose neighbouring turns also match is more likely the one meant.

What a person means spreads over a few turns ("what about Tuesday?", "yes, that one"), so each
fused turn gains ``weight`` times the best fused value of its previous and next turn in the
same conversation, where those are candidates too. A turn alone in its conversation is its own
neighbourhood; a turn longer than :data:`LONG_TURN_BYTES` lends nothing (it matches by holding
many things). The choices and their LoCoMo measurements: docs/design/neighbours.md.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from lake.errors import QueryError
from lake.search.defaults import DEFAULT_NEIGHBOUR_WEIGHT as DEFAULT_NEIGHBOUR_WEIGHT
from lake.search.fusion import FusedIds

# Under the default relevance floor, tune-split recall with smoothing fell from .758 to .738
# at 10 when a lifted turn kept only its own relevance; any share from 0.8 to 1 brought it
# back to .756. The lowest of those is taken.
NEIGHBOUR_RELEVANCE_SHARE = 0.8
# A turn whose rows' texts hold more UTF-8 bytes than this (characters, for English) lends its
# neighbours no support (see the module docstring).
LONG_TURN_BYTES = 2000


def check_neighbour_weight(weight: float) -> None:
    """QueryError unless ``weight`` is a finite number >= 0."""
    if not math.isfinite(weight) or weight < 0:
        raise QueryError(f"neighbour weight must be a finite number >= 0, not {weight!r}")


def neighbour_support(values: np.ndarray, previous: np.ndarray, following: np.ndarray,
                      ) -> np.ndarray:
    """Per position ``j``, the larger of ``values[previous[j]]`` and ``values[following[j]]``
    (a position of -1 means no neighbour in the list), never below 0: a neighbour adds
    support, it never takes any away."""
    values = np.asarray(values, np.float64)
    out = np.zeros(values.size)
    for where in (np.asarray(previous, np.int64), np.asarray(following, np.int64)):
        if where.size != values.size:
            raise ValueError(f"{where.size} neighbour positions for {values.size} values")
        present = where >= 0
        out[present] = np.maximum(out[present], values[where[present]])
    return out


class Smoothed(NamedTuple):
    """Fused turns after smoothing, best first, and each one's neighbours as positions in
    that order (-1: no neighbour among the fused turns)."""

    fused: FusedIds
    previous: np.ndarray
    following: np.ndarray


def smoothed(fused: FusedIds, previous_ids: np.ndarray, following_ids: np.ndarray,
             weight: float, lends: np.ndarray | None = None) -> Smoothed:
    """``fused`` with each turn's value raised by ``weight`` × its neighbour support
    (:func:`neighbour_support`), re-sorted best first. ``previous_ids[j]`` and
    ``following_ids[j]`` are the ids of turn ``fused.turns[j]``'s neighbours (-1: none); a
    neighbour that is not a fused turn adds nothing. A turn with neither neighbour is its own
    support; a turn marked False in ``lends`` (one bool per fused turn; see
    :data:`LONG_TURN_BYTES`) lends none. Turns of equal new value keep their fused order, so
    ties stay broken as fusion broke them."""
    check_neighbour_weight(weight)
    values = fused.values
    previous = positions_of(fused.turns, previous_ids)
    following = positions_of(fused.turns, following_ids)
    if weight > 0 and values.size:
        lent = values
        if lends is not None:
            lending = np.asarray(lends, bool)
            if lending.shape != values.shape:
                raise ValueError(f"{lending.size} lending marks for {values.size} turns")
            lent = np.where(lending, values, 0.0)
        alone = (np.asarray(previous_ids) < 0) & (np.asarray(following_ids) < 0)
        support = np.where(alone, np.maximum(values, 0.0),
                           neighbour_support(lent, previous, following))
        values = values + weight * support
    order = np.argsort(-values, kind="stable")
    place = np.empty_like(order)
    place[order] = np.arange(order.size)

    def moved(where: np.ndarray) -> np.ndarray:
        return np.where(where >= 0, place[np.maximum(where, 0)], -1)[order]

    return Smoothed(FusedIds(fused.turns[order], values[order], fused.names,
                             fused.ranks[:, order], fused.rows[:, order]),
                    moved(previous), moved(following))


def neighbour_relevance(relevances: np.ndarray, previous: np.ndarray, following: np.ndarray,
                        ) -> np.ndarray:
    """Each turn's relevance, raised to :data:`NEIGHBOUR_RELEVANCE_SHARE` of its neighbours'
    best where that is higher: a turn beside a real match is likely part of it, a little less
    surely than the match. No turn ends above the best relevance in the list, so a search
    that matched nothing still comes back empty under the floor."""
    own = np.asarray(relevances, np.float64)
    return np.maximum(own, NEIGHBOUR_RELEVANCE_SHARE * neighbour_support(own, previous,
                                                                         following))


def positions_of(turns: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Per id in ``wanted``, its position in ``turns`` (ids unique), -1 where absent or
    where the wanted id is negative."""
    turns = np.asarray(turns, np.int64)
    wanted = np.asarray(wanted, np.int64)
    out = np.full(wanted.size, -1, np.int64)
    if not turns.size or not wanted.size:
        return out
    order = np.argsort(turns, kind="stable")
    place = np.minimum(np.searchsorted(turns[order], wanted), turns.size - 1)
    hit = (turns[order][place] == wanted) & (wanted >= 0)
    out[hit] = order[place[hit]]
    return out
