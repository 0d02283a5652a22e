"""The last ranking step: fused values lifted by time, ordered, capped per conversation.

A :class:`Lift` multiplies a turn's fused value by a factor that depends on the turn alone (its
age, its distance from a time the query names) and says the largest factor it can give. The
ordering walks the fused turns best first and stops once no later turn can reach the top k:
that bound is the product of every lift's largest factor, so a new lift cannot be left out of
it. Everything here is pure.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from lake.search.fusion import recency_lift

__all__ = ["Lift", "Scored", "by_age", "lifted_top", "under_cap"]

SETTLE_EVERY = 8  # fused turns lifted between checks for a settled top k


@dataclass(frozen=True)
class Lift:
    """One multiplier of fused values: ``factors[j]`` for the turn at fused position ``j``,
    none above ``most``."""

    factors: np.ndarray
    most: float

    def __post_init__(self) -> None:
        if self.factors.size and float(self.factors.max()) > self.most:
            raise ValueError(f"a lift's factor {float(self.factors.max())} exceeds its "
                             f"largest {self.most}")


def by_age(seconds: np.ndarray, half_life_s: float, weight: float) -> Lift:
    """:func:`lake.search.fusion.recency_lift` of each turn's age (or distance from a named
    time) in ``seconds``: ``1 + weight`` at 0."""
    most = recency_lift(0.0, half_life_s, weight)  # also rejects a bad weight or half-life
    at = np.asarray(seconds, np.float64)
    if np.isnan(at).any():
        recency_lift(math.nan, half_life_s, weight)  # raises as the scalar lift does
    if most == 1.0:
        return Lift(np.ones(at.shape), 1.0)
    return Lift(1.0 + weight * np.power(0.5, np.maximum(at, 0.0) / half_life_s), most)


class Scored(NamedTuple):
    """A lifted turn: its final score, key, position in the fused order and lift."""

    final: float
    turn_key: tuple[str, str]
    position: int
    lift: float


def lifted_top(values: np.ndarray, kept: np.ndarray, turn_key: Callable[[int], tuple[str, str]],
               lifts: Sequence[Lift], k: int, cap: int, *, every: bool = False
               ) -> list[Scored]:
    """The kept turns of a fused list (``values`` falling, ``kept`` a mask), each scored
    ``value × Π lift factors``, best first (equal scores by turn key), enough of them that
    the first ``k`` under the per-conversation ``cap`` (0: none) are those of lifting all.
    ``turn_key(position)`` names the turn at a fused position; ``every``: lift every kept
    turn (a caller that drops some afterwards needs more than k)."""
    most = math.prod(lift.most for lift in lifts)
    scored: list[Scored] = []
    for position, value in enumerate(values.tolist()):
        # Fused values only fall from here on, so no later turn can end above value × most;
        # once the hits above that bound are settled, the rest need no lift.
        if not every and position >= k and position % SETTLE_EVERY == 0 and value >= 0 \
                and _settled(scored, value * most, k, cap):
            break
        if not kept[position]:
            continue
        lift = math.prod(float(lift.factors[position]) for lift in lifts)
        scored.append(Scored(value * lift, turn_key(position), position, lift))
    scored.sort(key=lambda s: (-s.final, s.turn_key))
    return scored


def _settled(scored: list[Scored], ceiling: float, k: int, cap: int) -> bool:
    """Whether the turns scoring above ``ceiling`` already fill the top ``k`` under the
    per-conversation ``cap`` (0: none); a turn's place under the cap depends only on the
    turns ranked above it."""
    above = sorted((s for s in scored if s.final > ceiling),
                   key=lambda s: (-s.final, s.turn_key))
    return len(above) >= k and sum(1 for _ in itertools.islice(under_cap(above, cap), k)) >= k


def under_cap(scored: Sequence[Scored], cap: int) -> Iterator[Scored]:
    """The turns, best first, that the per-conversation ``cap`` (0: none) lets through."""
    per_conv: dict[str, int] = {}
    for s in scored:
        cid = s.turn_key[0]
        if cap and per_conv.get(cid, 0) >= cap:
            continue
        per_conv[cid] = per_conv.get(cid, 0) + 1
        yield s
