"""The semantic arm scores a turn by its exchange: the query's cosine with the sum of the turn's
user and assistant row vectors.

A prompt and its answer together say what a turn was about; apart, each often does not ("and
the one from Tuesday?" / "Booked it, a table for four."). The model embeds every row alone, so
a query whose meaning is split across the prompt and the answer matches neither row well, and
ranking a turn by its best row loses it. The cosine with the normalized sum of the exchange's
unit vectors, ``(Σ v_i · q) / ‖Σ v_i‖``, rewards a turn whose rows agree with the query together
(for one row it is that row's cosine). Rows of the other roles (summary, anchor, note,
attachment text) were written to stand alone and keep their own cosine; a turn's value is the
larger of the two. Only rows of the searched roles the request may see take part.

The semantic generator still finds rows (exactly within a user's rows, through the graph in wider
scopes); the turns of the rows it found are re-scored, one entry per turn. Re-scoring only
those candidates gave the same LoCoMo figures as scoring every turn of the scope. It costs
~0.7 ms of a user-scope search at 100k rows (p50 3.2 → 4.1 ms with the lexical arm's user
statistics, on the bench's random vectors).

Measured on LoCoMo's tune split (conversations 0-4), user scope, no floor: the semantic arm
alone recall@5/10/25 .391/.517/.651 → .472/.585/.723 on minimal records; fused .718/.787/.857 →
.730/.789/.865; rich records fused .761/.820/.878 → .759/.819/.880 (within .002).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from lake.index.partition import PartitionIndex

__all__ = ["EXCHANGE_ROLES", "by_exchange", "exchange_cosines"]

EXCHANGE_ROLES = frozenset({"user", "assistant"})


def exchange_cosines(query: np.ndarray, vectors: np.ndarray, groups: np.ndarray,
                     count: int) -> np.ndarray:
    """Per group ``0..count-1``, the cosine of ``query`` (a unit vector) with the sum of the
    ``vectors`` whose ``groups`` entry names it; -inf for a group with no vector or a zero sum.
    Products are taken in the vectors' own precision (float32 as stored), sums in float64.

    ``‖Σ v‖²`` is summed from the rows' dot products with each other (``Σ_a Σ_b v_a · v_b``),
    never from the summed vectors: adding 384-wide vectors row by row (``np.add.at``,
    ``np.add.reduceat``, ``np.cumsum`` along rows) cost 0.1-0.6 ms a partition, the dot
    products of a turn's few rows a few microseconds."""
    groups = np.asarray(groups, np.int64)
    if vectors.shape[0] != groups.size:
        raise ValueError(f"{vectors.shape[0]} vectors for {groups.size} group numbers")
    order = np.argsort(groups, kind="stable")
    ordered = groups[order]
    rows = vectors[order]
    along = np.bincount(ordered, weights=rows @ np.asarray(query, rows.dtype), minlength=count)
    squared: np.ndarray = np.bincount(ordered, weights=np.einsum("ij,ij->i", rows, rows),
                                      minlength=count).astype(np.float64)
    gap = 1
    while gap < ordered.size:  # each pair of a group's rows, `gap` apart in the run
        pairs = np.flatnonzero(ordered[gap:] == ordered[:-gap])
        if pairs.size == 0:
            break  # groups are runs: none is longer than this
        dots = np.einsum("ij,ij->i", rows[pairs], rows[pairs + gap])
        squared += 2.0 * np.bincount(ordered[pairs], weights=dots, minlength=count)
        gap += 1
    cosines = np.full(count, -np.inf)
    ok = squared > 1e-24
    cosines[ok] = along[ok] / np.sqrt(squared[ok])
    return cosines


def by_exchange(part: PartitionIndex, allowed: np.ndarray, query: np.ndarray,
                found: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """The semantic arm's rows ``found`` in ``part`` (``(doc, cosine)``, best first) as one
    ``(doc, value)`` per turn, best first (ties by doc): the doc is the turn's best found row,
    the value the larger of its exchange's cosine and its best found row of another role.
    ``allowed`` (sorted docs) are the rows the request may see."""
    semantic = part.semantic
    if not found or semantic is None:
        return found
    cols = part.columns
    pairs = np.array(found, np.float64)
    docs, scores = pairs[:, 0].astype(np.int64), pairs[:, 1]
    turns, first, group_of = np.unique(cols.turn_numbers[docs], return_index=True,
                                       return_inverse=True)
    exchange_role = np.array([r in EXCHANGE_ROLES for r in cols.roles], np.bool_)
    # every doc of those turns that the request may see and that is of an exchange role
    starts, ends = cols.turn_docs(turns)
    lengths = ends - starts
    rows = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(
        starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    groups = np.repeat(np.arange(turns.size), lengths)
    seen = np.minimum(np.searchsorted(allowed, rows), max(allowed.size - 1, 0))
    keep = (allowed[seen] == rows) if allowed.size else np.zeros(rows.size, np.bool_)
    keep &= exchange_role[cols.role_codes[rows]]
    rows, groups = rows[keep], groups[keep]
    order = np.argsort(rows, kind="stable")
    rows, groups = rows[order], groups[order]
    have, vectors = semantic.vectors(rows)
    values = exchange_cosines(query, vectors, groups[np.searchsorted(rows, have)], turns.size)
    alone = ~exchange_role[cols.role_codes[docs]]
    np.maximum.at(values, group_of[alone], scores[alone])
    best_docs = docs[first]  # each turn's first (best) found row
    ranked = np.lexsort((best_docs, -values))
    return list(zip(best_docs[ranked].tolist(), values[ranked].tolist(), strict=True))
