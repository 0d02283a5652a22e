"""What every compared system offers the harness: named arms that answer a Query with turns.

Rows come back from an arm best first; they are collapsed to turns (a turn keeps its best
row) before anything is scored, so every system is judged on the same turn lists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import numpy as np

from bench.compare.rows import Query, TurnKey
from lake.search.fusion import RankedRow, fuse, recency_lift
from lake.search.request import DEFAULT_WEIGHTS, FusionSettings


@dataclass(frozen=True)
class SearchSettings:
    """Knobs shared by all systems: turns wanted, per-arm candidate depth, recency."""

    k: int = 10
    depth: int = 100
    as_of: datetime | None = None
    recency_weight: float = 1.0
    half_life_days: float = 7.0
    weights: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_WEIGHTS))

    def __post_init__(self) -> None:
        if self.k < 1 or self.depth < self.k:
            raise ValueError(f"need 1 <= k <= depth, got k={self.k} depth={self.depth}")
        if self.recency_weight > 0 and self.as_of is None:
            raise ValueError("a recency lift needs as_of")


class System(Protocol):
    """One search engine loaded with the shared rows."""

    name: str
    arms: tuple[str, ...]

    def search(self, arm: str, query: Query, vector: np.ndarray) -> list[TurnKey]:
        """The arm's best turns for the query, best first, at most settings.k."""
        ...

    def close(self) -> None:
        """Release connections and files."""
        ...


@dataclass(frozen=True)
class RowHit:
    """One row an arm returned: its id, turn, turn time (epoch seconds) and arm score."""

    rid: int
    turn: TurnKey
    ts: float
    score: float


def top_turns(rows: Sequence[RowHit], k: int) -> list[TurnKey]:
    """The first k distinct turns of a best-first row list."""
    out: list[TurnKey] = []
    seen: set[TurnKey] = set()
    for row in rows:
        if row.turn not in seen:
            seen.add(row.turn)
            out.append(row.turn)
            if len(out) == k:
                break
    return out


def fuse_like_turnlake(lists: Mapping[str, Sequence[RowHit]], settings: SearchSettings,
                       *, method: str = "rrf_score") -> list[TurnKey]:
    """turnlake's fusion on another system's arm lists: collapse to turns, weighted RRF
    (search's k, default rrf_score bonus), then the recency lift on each turn's best row."""
    ranked = {name: [RankedRow(str(r.rid), r.turn, r.score) for r in rows]
              for name, rows in lists.items() if rows}
    if not ranked:
        return []
    ts = {r.turn: r.ts for rows in lists.values() for r in rows}
    fused = fuse(ranked, {g: settings.weights.get(g, 1.0) for g in ranked}, k=FusionSettings().k,
                 method=method)  # type: ignore[arg-type]
    scored = []
    for turn in fused:
        lift = 1.0
        if settings.recency_weight > 0 and settings.as_of is not None:
            age = settings.as_of.timestamp() - ts[turn.turn_key]
            lift = recency_lift(age, settings.half_life_days * 86400.0, settings.recency_weight)
        scored.append((turn.rrf * lift, turn.turn_key))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [t for _, t in scored[:settings.k]]


def plain_rrf(lists: Mapping[str, Sequence[RowHit]], k: int, *, rrf_k: int = 60
              ) -> list[TurnKey]:
    """Unweighted RRF over row lists, rows then collapsed to turns (KDCube's reference SQL
    fuses rows this way)."""
    sums: dict[int, float] = {}
    by_rid: dict[int, RowHit] = {}
    for rows in lists.values():
        for rank, row in enumerate(rows, start=1):
            sums[row.rid] = sums.get(row.rid, 0.0) + 1.0 / (rrf_k + rank)
            by_rid[row.rid] = row
    order = sorted(sums, key=lambda rid: (-sums[rid], rid))
    return top_turns([by_rid[rid] for rid in order], k)
