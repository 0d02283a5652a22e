"""The semantic arm scores a turn by its exchange: the query's cosine with the sum of the turn's
user and assistant row vectors.

A prompt and its answer together say what a turn was about; apart, each often does not ("and
the one from Tuesday?" / "Booked it, a table for four."). The model embeds every row alone, so
a query whose meaning is split across the prompt and the answer matches neither row well, and
ranking a turn by its best row loses it. The cosine with the normalized sum of the exchange's
unit vectors, ``(Σ v_i · q) / ‖Σ v_i‖``, rewards a turn whose rows agree with the query together
(for one row it is that row's cosine). Rows of the other roles (summary, anchor, note,
attachment text) were written to stand alone and keep their own cosine; so does a row longer
than the model reads, whose cosine is its best passage's when that is nearer
(lake.index.passages): a long answer says many things, and the one the query asks about is
better read alone than summed with the rest. A turn's value is the larger of the two. Only rows
of the searched roles the request may see take part.

The semantic generator still finds rows (exactly within a user's rows, through the graph in wider
scopes); the turns of the rows it found are re-scored, one entry per turn. Re-scoring only
those candidates gave the same LoCoMo figures as scoring every turn of the scope. It costs
~0.8 ms of a user-scope search at 1M rows (four partitions), most of it gathering the exchange
rows' vectors and a few dozen array operations per partition.

Measured on LoCoMo's tune split (conversations 0-4), user scope, no floor: the semantic arm
alone recall@5/10/25 .391/.517/.651 → .472/.585/.723 on minimal records; fused .718/.787/.857 →
.730/.789/.865; rich records fused .761/.820/.878 → .759/.819/.880 (within .002).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from lake.index.partition import PartitionIndex

from lake.tables import EXCHANGE_ROLES

__all__ = ["by_exchange", "exchange_cosines"]

_ZERO_SUM = 1e-12  # relative to the rows' own squared lengths


def exchange_cosines(query: np.ndarray, vectors: np.ndarray, groups: np.ndarray,
                     count: int) -> np.ndarray:
    """Per group ``0..count-1``, the cosine of ``query`` (a unit vector) with the sum of the
    ``vectors`` whose ``groups`` entry names it; -inf for a group with no vector or a zero sum
    (``‖Σ v‖² <= 1e-12 × Σ ‖v‖²``). Each group's vectors must be one run (ValueError otherwise).

    ``‖Σ v‖²`` is summed from the rows' dot products with each other (``Σ_a Σ_b v_a · v_b``),
    never from the summed vectors: adding 384-wide vectors row by row (``np.add.at``,
    ``np.add.reduceat``, ``np.cumsum`` along rows) cost 0.1-0.6 ms a partition. Products are
    taken row by row (einsum), so a row's value never depends on which rows came with it
    (a matrix product's rounding does, by how BLAS blocks it)."""
    groups = np.asarray(groups, np.int64)
    if vectors.shape[0] != groups.size:
        raise ValueError(f"{vectors.shape[0]} vectors for {groups.size} group numbers")
    runs = int(np.count_nonzero(groups[1:] != groups[:-1])) + 1 if groups.size else 0
    if runs != int(np.count_nonzero(np.bincount(groups, minlength=count))):
        raise ValueError("each group's vectors must be one run")
    along = np.bincount(groups, weights=np.einsum("ij,j->i", vectors,
                                                  np.asarray(query, vectors.dtype)),
                        minlength=count)
    own = np.bincount(groups, weights=np.einsum("ij,ij->i", vectors, vectors), minlength=count)
    squared: np.ndarray = own.astype(np.float64)
    gap = 1
    while gap < groups.size:  # each pair of a group's rows, `gap` apart in its run
        same = groups[gap:] == groups[:-gap]
        if not same.any():
            break  # no run is longer than this
        dots = np.einsum("ij,ij->i", vectors[:-gap], vectors[gap:])
        squared += 2.0 * np.bincount(groups[:-gap][same], weights=dots[same], minlength=count)
        gap += 1
    cosines = np.full(count, -np.inf)
    # a sum whose rows cancel to within rounding of their own lengths is a zero sum
    ok = squared > _ZERO_SUM * own
    cosines[ok] = along[ok] / np.sqrt(squared[ok])
    return cosines


class _Candidates(NamedTuple):
    """One partition's found rows, their turns and the exchange rows' vectors."""

    docs: np.ndarray  # found rows, best first
    scores: np.ndarray
    first: np.ndarray  # per turn, its first (best) found row's position in ``docs``
    group_of: np.ndarray  # per found row, its turn's number among ``first``
    alone: np.ndarray  # per found row, whether it stands alone (not an exchange role, or long)
    vectors: np.ndarray  # the turns' visible exchange rows' vectors
    groups: np.ndarray  # per vector, its turn's number among ``first``


def _candidates(part: PartitionIndex, allowed: np.ndarray, found: list[tuple[int, float]],
                long_rows: np.ndarray) -> _Candidates:
    semantic = part.semantic
    assert semantic is not None
    cols = part.columns
    pairs = np.array(found, np.float64)
    docs, scores = pairs[:, 0].astype(np.int64), pairs[:, 1]
    turns, first, group_of = np.unique(cols.turn_numbers[docs], return_index=True,
                                       return_inverse=True)
    exchange_role = np.array([r in EXCHANGE_ROLES for r in cols.roles], np.bool_)
    # every doc of those turns that the request may see and that is of an exchange role;
    # the turns' runs of docs taken in doc order, so the docs come out ascending
    starts, ends = cols.turn_docs(turns)
    by_start = np.argsort(starts)
    lengths = (ends - starts)[by_start]
    rows = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(
        starts[by_start] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    groups = np.repeat(by_start, lengths)
    seen = np.minimum(np.searchsorted(allowed, rows), max(allowed.size - 1, 0))
    keep = (allowed[seen] == rows) if allowed.size else np.zeros(rows.size, np.bool_)
    keep &= exchange_role[cols.role_codes[rows]]
    rows, groups = rows[keep], groups[keep]
    have, vectors = semantic.vectors(rows)
    alone = ~exchange_role[cols.role_codes[docs]]
    if long_rows.size:  # ascending: a binary search each (np.isin sorted both, ~4x slower)
        at = np.minimum(np.searchsorted(long_rows, docs), long_rows.size - 1)
        alone |= long_rows[at] == docs
    return _Candidates(docs, scores, first, group_of, alone, vectors,
                       groups[np.searchsorted(rows, have)])


def by_exchange(candidates: Sequence[tuple[PartitionIndex, np.ndarray, list[tuple[int, float]]]],
                query: np.ndarray, long_rows: Sequence[np.ndarray] | None = None
                ) -> list[list[tuple[int, float]]]:
    """Per partition, the semantic arm's rows it found (``(doc, cosine)``, best first, among
    the sorted docs ``allowed`` the request may see) as one ``(doc, value)`` per turn, best
    first (ties by doc): the doc is the turn's best found row, the value the larger of its
    exchange's cosine and its best found row that stands alone: of another role, or one of the
    partition's ``long_rows`` (rows with passages, scored by their best one; none when not
    given). All partitions' turns are valued in one pass (a pass costs the same few dozen
    array operations however many)."""
    none = np.zeros(0, np.int64)
    longs = [none] * len(candidates) if long_rows is None else list(long_rows)
    prepared = [_candidates(part, allowed, found, long) if found and part.semantic is not None
                else None for (part, allowed, found), long in zip(candidates, longs, strict=True)]
    offsets = np.cumsum([0] + [c.first.size for c in prepared if c is not None])
    every = [c for c in prepared if c is not None]
    values = exchange_cosines(
        query, np.concatenate([c.vectors for c in every]) if every else
        np.zeros((0, query.shape[0]), np.float32),
        np.concatenate([c.groups + o for c, o in zip(every, offsets.tolist(), strict=False)])
        if every else np.zeros(0, np.int64), int(offsets[-1]))
    out: list[list[tuple[int, float]]] = []
    at = 0
    for (_, _, found), c in zip(candidates, prepared, strict=True):
        if c is None:
            out.append(found)
            continue
        mine = values[offsets[at]:offsets[at + 1]]
        at += 1
        np.maximum.at(mine, c.group_of[c.alone], c.scores[c.alone])
        best_docs = c.docs[c.first]
        ranked = np.lexsort((best_docs, -mine))
        out.append(list(zip(best_docs[ranked].tolist(), mine[ranked].tolist(), strict=True)))
    return out
