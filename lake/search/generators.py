"""The three candidate generators over one search's partitions: each returns, per partition,
its best rows (doc ids and scores, best first) for the fusion in lake.search.service.

* semantic: the nearest rows, then their turns valued by their exchange (lake.search.exchange);
* lexical: BM25 with the query words weighed by the searched rows' statistics (lake.search.bm25);
* trigram: pg_trgm word similarity over every partition's segments at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from lake.index.lexical import DEFAULT_ROLE_WEIGHTS
from lake.index.partition import PartitionIndex
from lake.index.passage_index import raised_by_passages
from lake.index.segments import merge_top
from lake.index.trigram import search_scoped
from lake.search.access import ResolvedScope
from lake.search.bm25 import partition_scales, scope_idf, scoped_word_weights
from lake.search.exchange import by_exchange
from lake.search.query import Query
from lake.search.request import SearchRequest
from lake.search.whole_scope import whole_scope_turns
from lake.tables import EXCHANGE_ROLES, ROLES

__all__ = ["PartHits", "QueryStatistics", "lexical_hits", "semantic_hits", "trigram_hits"]

_UNIFORM_ROLES = dict.fromkeys(ROLES, 1.0)


class PartHits(NamedTuple):
    """One generator's hits in one partition, best first (ties by doc id)."""

    part: PartitionIndex
    docs: list[int]
    scores: list[float]


@dataclass(frozen=True)
class QueryStatistics:
    """The query words' statistics over the searched rows, read once per search: the lexical
    arm's word weights or partition scales (lake.search.bm25), and each stem's IDF, which
    the fusion's coverage weight reads (lake.search.coverage)."""

    word_weights: dict[str, dict[str, float]] = field(default_factory=dict)
    scales: dict[str, float] = field(default_factory=dict)
    query_idf: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, parts: list[PartitionIndex], query: Query, user_id: str | None
           ) -> QueryStatistics:
        """With a user: IDF among that user's rows of ``parts``; else among all their rows."""
        stems = query.stems
        if not stems:
            return cls()
        everywhere = {p.manifest.build_id: p.lexical.term_stats(query.words) for p in parts}
        if user_id is None:
            scales = partition_scales(everywhere) if len(parts) > 1 else {}
            return cls(scales=scales, query_idf=scope_idf(stems, everywhere))
        users = {p.manifest.build_id: p.lexical.term_stats(query.words, user_id=user_id)
                 for p in parts}
        return cls(word_weights=scoped_word_weights(stems, everywhere, users),
                   query_idf=scope_idf(stems, users))


def lexical_hits(in_scope: list[tuple[PartitionIndex, np.ndarray]], scope: ResolvedScope,
                 request: SearchRequest, query: Query, statistics: QueryStatistics
                 ) -> list[PartHits]:
    """BM25 hits of every partition, on one score scale: with a user in scope, every
    partition weighs each query word by its IDF among that user's rows (lake.search.bm25)."""
    out: list[PartHits] = []
    for part, allowed in in_scope:
        # The lexical index filters by user / conversation / role itself; time and expiry
        # are checked against the allowed set afterwards, so over-fetch a little.
        # One BM25 pass with every role at weight 1, then the role weights multiply each
        # row's score: weighting inside tantivy would evaluate the query once per weight.
        limit, cols = request.depth * 3, part.columns
        # When all of the user's rows fit in the limit, the role filter can be left to the
        # allowed set below: fewer clauses for tantivy, the same rows in the end.
        roles = None if scope.user_id is not None and \
            cols.docs_of_user(scope.user_id).size <= limit else request.roles
        found = part.lexical.search(query.words, limit=limit, user_id=scope.user_id,
                                    conversation_id=scope.conversation_id, roles=roles,
                                    role_weights=_UNIFORM_ROLES,
                                    context=set(request.roles) >= EXCHANGE_ROLES,
                                    word_weights=statistics.word_weights.get(
                                        part.manifest.build_id))
        if not found:
            continue
        docs = np.fromiter((d for d, _ in found), np.int64, len(found))
        slot = np.minimum(np.searchsorted(allowed, docs), allowed.size - 1)
        visible = (allowed[slot] == docs).tolist()
        factor = statistics.scales.get(part.manifest.build_id, 1.0)
        role_names, role_codes = cols.roles, cols.role_codes
        weighted = sorted(
            ((d, s * DEFAULT_ROLE_WEIGHTS[role_names[role_codes[d]]] * factor)
             for (d, s), ok in zip(found, visible, strict=True) if ok),
            key=lambda item: (-item[1], item[0]))
        top = weighted[:request.depth]
        out.append(PartHits(part, [d for d, _ in top], [s for _, s in top]))
    return out


def semantic_hits(in_scope: list[tuple[PartitionIndex, np.ndarray]],
                  query_vector: np.ndarray | None, depth: int) -> list[PartHits]:
    """The nearest rows of every partition, a long row scored by its best passage when that is
    nearer (lake.index.passage_index, among the ``depth`` nearest passages); the turns of the
    ``2 × depth`` nearest of them all, valued by their exchange (lake.search.exchange), where a
    long row stands alone. Valuing every partition's ``depth`` candidates cost ~0.2 ms a
    partition; on LoCoMo's tune split the cut left recall at every k as it was (``depth`` alone
    lost up to .006). A small scope is answered in one pass over all its partitions
    (lake.search.whole_scope), with the same hits."""
    if query_vector is None:
        return []
    searched = [(part, allowed) for part, allowed in in_scope
                if part.semantic is not None and part.manifest.dim == query_vector.shape[0]]
    whole = whole_scope_turns(searched, query_vector, depth)
    if whole is not None:
        return [PartHits(part, [d for d, _ in turns], [s for _, s in turns])
                for (part, _), turns in zip(searched, whole, strict=True)]
    found: list[tuple[PartitionIndex, np.ndarray, list[tuple[int, float]]]] = []
    long_rows: list[np.ndarray] = []
    for part, allowed in searched:
        assert part.semantic is not None  # searched holds only partitions with one
        rows = part.semantic.search(query_vector, allowed=allowed, limit=depth)
        docs = np.zeros(0, np.int64)
        if part.passages is not None:
            docs, cosines = part.passages.best(query_vector, allowed, limit=depth)
            rows = raised_by_passages(rows, docs, cosines, depth)
        found.append((part, allowed, rows))
        long_rows.append(docs)
    scores = np.fromiter((s for _, _, rows in found for _, s in rows), np.float64)
    if len(found) > 1 and scores.size > 2 * depth:
        cut = float(np.partition(scores, scores.size - 2 * depth)[scores.size - 2 * depth])
        # rows of equal score at the cut all stay: which of them a cut would keep is arbitrary
        found = [(part, allowed, [(d, s) for d, s in rows if s >= cut])
                 for part, allowed, rows in found]
    return [PartHits(part, [d for d, _ in turns], [s for _, s in turns])
            for (part, _, _), turns in zip(found, by_exchange(found, query_vector, long_rows),
                                           strict=True)]


def trigram_hits(in_scope: list[tuple[PartitionIndex, np.ndarray]], query: Query,
                 request: SearchRequest) -> list[PartHits]:
    """The best rows of all partitions by word similarity to the query, as one index over
    their rows would rank them (ties by partition order, then row number), per partition."""
    # all partitions' segments as one search: one exact-scoring budget and one top for all of
    # them (a segment's scores depend on its own rows only)
    scoped = [(g, part, piece) for g, (part, allowed) in enumerate(in_scope)
              for piece in part.trigram_scopes(allowed)]
    found = search_scoped([(piece.index, piece.allowed) for _, _, piece in scoped],
                          query.text,
                          limit=request.depth, threshold=request.trigram_threshold,
                          order=[(g, piece.numbers) for g, _, piece in scoped])
    per_part: dict[int, list[tuple[np.ndarray | None, list[tuple[int, float]]]]] = {}
    for (_, part, piece), hits in zip(scoped, found, strict=True):
        per_part.setdefault(id(part), []).append((piece.numbers, hits))
    out = []
    for part, _ in in_scope:
        pieces = per_part.get(id(part), [])
        merged = pieces[0][1] if len(pieces) == 1 and pieces[0][0] is None else merge_top(
            [(n if n is not None else np.arange(len(part.trigram)), h) for n, h in pieces],
            request.depth)
        out.append(PartHits(part, [d for d, _ in merged], [s for _, s in merged]))
    return out
