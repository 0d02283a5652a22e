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
(lake.index.passage_index): a long answer says many things, and the one the query asks about is
better read alone than summed with the rest. A turn's value is the larger of the two. Only rows
of the searched roles the request may see take part.

The semantic generator still finds rows (exactly within a user's rows, through the graph in wider
scopes); the turns of the rows it found are re-scored, one entry per turn. Re-scoring only
those candidates gave the same LoCoMo figures as scoring every turn of the scope. Gathered
partition by partition (:func:`by_exchange`) it cost ~0.6 ms of a user-scope search at 1M rows
(four partitions), most of it a few dozen array operations per partition; a small scope is
answered in one pass over all its partitions instead (lake.search.whole_scope). Both hand their
rows to :func:`ranked_turns`, which values every partition's turns at once.

What it measured: docs/design/exchange.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from lake.index.partition import PartitionIndex, RowColumns

from lake.tables import EXCHANGE_ROLES

__all__ = ["FoundRows", "by_exchange", "exchange_cosines", "exchange_role_codes",
           "ranked_turns"]

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


def exchange_role_codes(cols: RowColumns) -> np.ndarray:
    """Per role code of ``cols``, whether it is one of the exchange's roles."""
    return np.array([r in EXCHANGE_ROLES for r in cols.roles], np.bool_)


class FoundRows(NamedTuple):
    """The semantic arm's found rows over all searched partitions, each partition's best first
    (ties by doc). A turn's id is its partition's number in the search ``<< 32 |`` its turn
    number there."""

    slots: np.ndarray  # per row, its partition's number in the search
    docs: np.ndarray
    scores: np.ndarray  # float64
    alone: np.ndarray  # whether the row stands alone (not an exchange role, or long)
    turns: np.ndarray  # its turn's id


def ranked_turns(found: FoundRows, vectors: np.ndarray, vector_turns: np.ndarray,
                 query: np.ndarray, partitions: int) -> list[list[tuple[int, float]]]:
    """Per partition ``0..partitions-1``, the turns of the ``found`` rows as ``(doc, value)``,
    best first (ties by doc): the doc is the turn's best found row, the value the larger of
    its exchange's cosine (:func:`exchange_cosines` of ``query`` with the exchange rows'
    ``vectors``; ``vector_turns`` their turn ids, one run per turn, and rows of a turn not
    found, or of turn -1, ignored) and its best found row that stands alone."""
    turns, first, group_of = np.unique(found.turns, return_index=True, return_inverse=True)
    at = np.minimum(np.searchsorted(turns, vector_turns), max(turns.size - 1, 0))
    mine = turns[at] == vector_turns if turns.size else np.zeros(vector_turns.size, np.bool_)
    values = exchange_cosines(query, vectors[mine], at[mine], turns.size)
    alone = found.alone
    np.maximum.at(values, group_of[alone], found.scores[alone])
    docs, slots = found.docs[first], found.slots[first]
    order = np.lexsort((docs, -values, slots))  # by partition, then best first
    bounds = np.searchsorted(slots[order], np.arange(partitions + 1)).tolist()
    pairs = list(zip(docs[order].tolist(), values[order].tolist(), strict=True))
    return [pairs[a:b] for a, b in itertools.pairwise(bounds)]


def _candidates(slot: int, part: PartitionIndex, allowed: np.ndarray,
                found: list[tuple[int, float]], long_rows: np.ndarray
                ) -> tuple[FoundRows, np.ndarray, np.ndarray]:
    """One partition's found rows, and the vectors and turn ids of the exchange rows of their
    turns that the request may see."""
    semantic = part.semantic
    assert semantic is not None
    cols = part.columns
    pairs = np.array(found, np.float64)
    docs, scores = pairs[:, 0].astype(np.int64), pairs[:, 1]
    turns = np.unique(cols.turn_numbers[docs])
    exchange_role = exchange_role_codes(cols)
    # every doc of those turns that the request may see and that is of an exchange role;
    # the turns' runs of docs taken in doc order, so the docs come out ascending
    starts, ends = cols.turn_docs(turns)
    by_start = np.argsort(starts)
    lengths = (ends - starts)[by_start]
    rows = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(
        starts[by_start] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    seen = np.minimum(np.searchsorted(allowed, rows), max(allowed.size - 1, 0))
    keep = (allowed[seen] == rows) if allowed.size else np.zeros(rows.size, np.bool_)
    keep &= exchange_role[cols.role_codes[rows]]
    have, vectors = semantic.vectors(rows[keep])
    alone = ~exchange_role[cols.role_codes[docs]]
    if long_rows.size:  # ascending: a binary search each (np.isin sorted both, ~4x slower)
        at = np.minimum(np.searchsorted(long_rows, docs), long_rows.size - 1)
        alone |= long_rows[at] == docs
    slots = np.full(docs.size, slot, np.int64)
    return (FoundRows(slots, docs, scores, alone, slot << 32 | cols.turn_numbers[docs]),
            vectors, slot << 32 | cols.turn_numbers[have])


def by_exchange(candidates: Sequence[tuple[PartitionIndex, np.ndarray, list[tuple[int, float]]]],
                query: np.ndarray, long_rows: Sequence[np.ndarray] | None = None
                ) -> list[list[tuple[int, float]]]:
    """Per partition, the semantic arm's rows it found (``(doc, cosine)``, best first, among
    the sorted docs ``allowed`` the request may see) as one ``(doc, value)`` per turn, best
    first (ties by doc), as :func:`ranked_turns` values them: a found row stands alone when it
    is of another role than the exchange's, or one of the partition's ``long_rows`` (rows with
    passages, scored by their best one; none when not given). All partitions' turns are
    valued in one pass (a pass costs the same few dozen array operations however many)."""
    none = np.zeros(0, np.int64)
    longs = [none] * len(candidates) if long_rows is None else list(long_rows)
    valued = [bool(found) and part.semantic is not None for part, _, found in candidates]
    prepared = [_candidates(slot, part, allowed, found, long)
                for slot, ((part, allowed, found), long, value)
                in enumerate(zip(candidates, longs, valued, strict=True)) if value]
    if not prepared:
        return [found for _, _, found in candidates]
    ranked = ranked_turns(FoundRows(*(np.concatenate(column) for column in
                                      zip(*(rows for rows, _, _ in prepared), strict=True))),
                          np.concatenate([vectors for _, vectors, _ in prepared]),
                          np.concatenate([turns for _, _, turns in prepared]),
                          query, len(candidates))
    return [turns if value else found
            for (_, _, found), turns, value in zip(candidates, ranked, valued, strict=True)]
