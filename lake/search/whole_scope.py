"""The semantic arm over a small scope, in one pass over all its partitions.

A user's history is a few hundred rows in each month's partition. Searched the general way
(lake.search.generators), each partition answers on its own: its index scores the user's
rows, returns its best as a list, and the turns of those rows are then gathered again, row
by row, to value their exchange (lake.search.exchange). Each step is a few dozen small array
operations, and a user-scope search at 1M rows repeats them for four partitions: ~1.2 ms of a
~5 ms search, most of it per-call overhead rather than arithmetic.

When every searched partition scores its scope exactly anyway (a flat index, or a scope under
the graph's exact-search bound: :meth:`SemanticIndex.scores_exactly`) and the scope is at most
:data:`WHOLE_SCOPE_ROWS` rows in all, the same answer comes from one pass: every visible row's
vector is read once, scored exactly (:func:`lake.index.semantic.exact_cosines`, as a search
scores it), a long row is raised by its best passage (lake.index.passage_index) and each
partition's ``depth`` best rows and the cut across partitions are taken as the general path
takes them, and the exchange rows are the scope's own rows of the found turns. The answer is
the general path's, row for row and value for value (its tests hold the two together); the
general path remains for wide scopes, graph searches, and a passage's row without a vector of
its own.

Measured on the 1M-row bench lake (user scope, 300 queries, alternated runs): the semantic
arm's median 1.17-1.29 ms → 0.85-0.93 ms. Scoring 640 rows exactly costs 0.17 ms against
0.05 ms through BLAS, and 0.78 ms against 0.39 ms at 2,048 rows, where the pass stops paying:
hence the bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from lake.index.semantic import exact_cosines, unit_query
from lake.search.exchange import FoundRows, exchange_role_codes, ranked_turns

if TYPE_CHECKING:
    from lake.index.partition import PartitionIndex

__all__ = ["WHOLE_SCOPE_ROWS", "whole_scope_turns"]

# The most visible rows, over all searched partitions, that one exact pass scores (see the
# module docstring).
WHOLE_SCOPE_ROWS = 2048


def whole_scope_turns(searched: Sequence[tuple[PartitionIndex, np.ndarray]],
                      query: np.ndarray, depth: int) -> list[list[tuple[int, float]]] | None:
    """Per searched ``(partition, allowed docs)`` (each with a semantic index of the query's
    width), the semantic arm's turns as ``(best found doc, value)``, best first, as the general
    path finds them (its nearest ``depth`` rows per partition, the ``2 × depth`` nearest of
    them all, their turns valued by lake.search.exchange); None when the scope is too wide for
    one pass or not scored exactly, for the general path to answer."""
    if sum(int(allowed.size) for _, allowed in searched) > WHOLE_SCOPE_ROWS:
        return None
    indexes = [part.semantic for part, _ in searched]
    if not all(index is not None and index.scores_exactly(int(allowed.size))
               for index, (_, allowed) in zip(indexes, searched, strict=True)):
        return None
    if not searched:
        return []
    read = [index.vectors(allowed) for index, (_, allowed) in zip(indexes, searched, strict=True)
            if index is not None]
    sizes = np.array([docs.size for docs, _ in read], np.int64)
    if not sizes.sum():
        return [[] for _ in searched]
    docs = np.concatenate([d for d, _ in read])
    vectors = np.concatenate([v for _, v in read])
    slots = np.repeat(np.arange(len(searched), dtype=np.int64), sizes)
    scores = exact_cosines(vectors, unit_query(query, vectors.shape[1])).astype(np.float64)
    top = _best_of_each(docs, scores, slots, sizes, depth)  # as each partition's search
    long = np.zeros(docs.size, np.bool_)
    if any(part.passages is not None for part, _ in searched):
        raised = _raised_by_passages(searched, query, depth, docs, sizes, top, scores)
        if raised is None:
            return None
        scores, long = raised
        candidates = np.flatnonzero(scores > -np.inf)
        top = candidates[_best_of_each(docs[candidates], scores[candidates],
                                       slots[candidates], np.bincount(slots[candidates],
                                                                      minlength=sizes.size),
                                       depth)]
    if len(searched) > 1 and top.size > 2 * depth:
        # the 2 × depth best of them all; rows of equal score at the cut all stay
        cut = np.partition(scores[top], top.size - 2 * depth)[top.size - 2 * depth]
        top = top[scores[top] >= cut]
    turns = np.concatenate([part.columns.turn_numbers[d] for (part, _), (d, _)
                            in zip(searched, read, strict=True)]) | slots << 32
    exchange = np.concatenate([exchange_role_codes(part.columns)[part.columns.role_codes[d]]
                               for (part, _), (d, _) in zip(searched, read, strict=True)])
    found = FoundRows(slots[top], docs[top], scores[top], ~exchange[top] | long[top], turns[top])
    # the rows of other roles marked as of no turn: ranked_turns reads the found turns'
    # exchange rows out of them all (copying 384-wide rows twice cost ~60 µs a search)
    return ranked_turns(found, vectors, np.where(exchange, turns, -1), query, len(searched))


def _best_of_each(docs: np.ndarray, scores: np.ndarray, slots: np.ndarray, sizes: np.ndarray,
                  depth: int) -> np.ndarray:
    """Positions of each partition's ``depth`` best rows (``sizes`` rows each, one run per
    partition), each partition's best first, ties by doc."""
    order = np.lexsort((docs, -scores, slots))
    rank = np.arange(docs.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    top: np.ndarray = order[rank < depth]
    return top


def _raised_by_passages(searched: Sequence[tuple[PartitionIndex, np.ndarray]],
                        query: np.ndarray, depth: int, docs: np.ndarray, sizes: np.ndarray,
                        top: np.ndarray, scores: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray] | None:
    """Each row's score as :func:`lake.index.passage_index.raised_by_passages` gives it (-inf for a
    row neither among its partition's ``top`` rows nor among the rows its passages found), and
    which rows the passages found (long rows stand alone); None when a row the passages found
    has no vector of its own here."""
    raised = np.full(docs.size, -np.inf)
    raised[top] = scores[top]
    long = np.zeros(docs.size, np.bool_)
    for (part, allowed), start, size in zip(searched, (np.cumsum(sizes) - sizes).tolist(),
                                            sizes.tolist(), strict=True):
        if part.passages is None:
            continue
        found, cosines = part.passages.best(query, allowed, limit=depth)
        mine = docs[start:start + size]
        at = np.minimum(np.searchsorted(mine, found), max(size - 1, 0))
        if found.size and (not size or not np.array_equal(mine[at], found)):
            return None
        at += start
        raised[at] = np.maximum(raised[at], cosines)
        long[at] = True
    return raised, long
