"""The conversation-search service: scope, three generators, fusion, recency, snippets.

One instance per lake (cheap to keep): it caches opened partition indexes by build id and
partition statuses by table version, and loads the embedding model at most once.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from lake.embedding.base import Embedder
from lake.embedding.passages import splitter_of
from lake.errors import EmbeddingError, IndexUnavailable, QueryError
from lake.index.codes import holding_codes
from lake.index.manifest import PartitionManifest, local_build
from lake.index.opened import OpenedPartitions, partition_cost
from lake.index.partition import PartitionIndex
from lake.index.status import PartitionStatus, StatusCache
from lake.index.trigram import word_similarities
from lake.search.access import ResolvedScope, resolve_scope
from lake.search.addressed import Editions
from lake.search.coverage import coverage_weight, coverages, turn_stems
from lake.search.fusion import FusedIds, fuse_ids
from lake.search.generators import (
    PartHits,
    QueryStatistics,
    lexical_hits,
    semantic_hits,
    trigram_hits,
)
from lake.search.lifts import Lift, Scored, by_age, lifted_top, under_cap
from lake.search.named_time import NAMED_TIME_HALF_LIFE_DAYS, NamedTime, seconds_outside
from lake.search.neighbours import (
    LONG_TURN_BYTES,
    check_neighbour_weight,
    neighbour_relevance,
    smoothed,
)
from lake.search.query import Query
from lake.search.relevance import (
    SHORT_QUERY_STEMS,
    found_by_meaning,
    literal_relevance,
    relevance,
)
from lake.search.request import (
    GENERATORS,
    Generator,
    GeneratorRank,
    Hit,
    SearchRequest,
    SearchResult,
)
from lake.search.snippets import snippets
from lake.store import LakeStore
from lake.tables import ROLES, Table
from lake.timelines import conversation_filter

EmbedderFactory = Callable[[], Embedder]
_US = 1_000_000
COVERED_TURNS = 20  # the lexical turns weighed by their coverage (see _coverage_weights)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A scope of at least this many rows runs the semantic arm on a thread of its own beside the
# text arms. Its scan and the trigram arm's are mostly native code that lets go of the
# interpreter lock: on the 1M-row bench lake a tenant-scope hybrid search went from 69 to 46 ms
# p50 (2 cores). A user's scope is a few thousand rows, where handing work to a thread costs
# more than it saves (tried: 7.4 against 5.4 ms), so it stays on the caller's thread.
PARALLEL_ARMS_MIN_ROWS = 100_000
_ARM_POOL: ThreadPoolExecutor | None = None
_ARM_POOL_LOCK = threading.Lock()


class SearchService:
    """Answers SearchRequests over a lake's partition indexes."""

    def __init__(self, store: LakeStore, *, embedder: Embedder | EmbedderFactory | None = None,
                 memory_budget: int | None = None) -> None:
        self.store = store
        self._embedder_source = embedder
        self._embedder: Embedder | None = None
        self._statuses = StatusCache(store)
        # opened partitions, least recently used closed first past memory_budget bytes
        self.partitions = OpenedPartitions(memory_budget)
        self._editions = Editions(store)

    # -- public -------------------------------------------------------------------------

    def search(self, request: SearchRequest) -> SearchResult:
        """Run one search; see SearchRequest for the knobs."""
        _validate(request)
        try:
            return self._search(request, fresh=False)
        except (FileNotFoundError, IndexUnavailable):
            # A build was superseded and removed after the statuses named it (by this lake's
            # indexer, or another server's over an object-store lake): look again, once.
            try:
                return self._search(request, fresh=True)
            except FileNotFoundError as exc:
                raise IndexUnavailable(f"an index build went away while it was being read ({exc}); "
                                       "search again") from exc

    def _search(self, request: SearchRequest, *, fresh: bool) -> SearchResult:
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        scope = resolve_scope(request.principal, request.scope, user_id=request.user_id,
                              conversation_id=request.conversation_id)
        as_of = request.as_of or datetime.now(UTC)
        parts, stale, unindexed = self._partitions(scope.tenant, request, fresh=fresh)
        query = Query.of(request.query, as_of if request.time_weight > 0 else None)
        if not query.text or not parts:
            return SearchResult([], stale, unindexed, None, timings)
        query_vector, semantic_error = None, None
        if request.enabled.get("semantic", True) and any(
                p.manifest.dim for p in parts) and request.weights.get("semantic", 1.0) > 0:
            t = time.perf_counter()
            query_vector, semantic_error = self._embed_query(query.text)
            timings["embed_query"] = _ms(t)
        lists: dict[str, list[PartHits]] = {g: [] for g in GENERATORS}
        t = time.perf_counter()
        origin = self._conversations_of(scope.tenant, request)
        in_scope = [(part, allowed) for part in parts
                    if (allowed := _allowed_docs(part, scope, request, as_of, origin)).size]
        on = {g: request.enabled.get(g, True) and request.weights.get(g, 1.0) > 0
              for g in GENERATORS}
        statistics = QueryStatistics.of([p for p, _ in in_scope], query, scope.user_id) \
            if on["lexical"] and in_scope else QueryStatistics()
        # A partition's vectors answer only queries embedded by the same model: another
        # model's vectors (even of the same width) would rank rows by noise.
        query_model = self.embedder().name if query_vector is not None else None
        by_meaning = [(p, a) for p, a in in_scope if p.manifest.model == query_model]
        foreign = [p.name for p, _ in in_scope
                   if query_model is not None and p.manifest.model not in (None, query_model)]
        arms: dict[Generator, Callable[[], list[PartHits]]] = {
            "semantic": lambda: semantic_hits(by_meaning, query_vector, request.depth),
            "lexical": lambda: lexical_hits(in_scope, scope, request, query, statistics),
            "trigram": lambda: trigram_hits(in_scope, query, request)}
        runs = [name for name in arms if on[name] and in_scope
                and (name != "semantic" or (query_vector is not None and by_meaning))]
        aside: Future[tuple[list[PartHits], float]] | None = None
        if "semantic" in runs and len(runs) > 1 and \
                sum(int(allowed.size) for _, allowed in in_scope) >= PARALLEL_ARMS_MIN_ROWS:
            aside = _arm_pool().submit(_timed, arms["semantic"])
            runs.remove("semantic")
        for name in runs:
            lists[name], timings[name] = _timed(arms[name])
        if aside is not None:
            lists["semantic"], timings["semantic"] = aside.result()
        timings["generate"] = _ms(t)
        t = time.perf_counter()
        semantic_ran = on["semantic"] and query_vector is not None
        hits, below_floor = self._fuse(lists, request, as_of, set(stale), semantic_ran,
                                       statistics.query_idf, query, query_vector)
        timings["fuse"] = _ms(t)
        t = time.perf_counter()
        hits = self._editions.with_addresses(hits, self._statuses.logs_version)
        timings["addresses"] = _ms(t)
        timings["total"] = _ms(t0)
        return SearchResult(hits, stale, unindexed, semantic_error, timings, below_floor,
                            request.min_relevance, foreign, query_model, list(query.named))

    def statuses(self, tenant: str | None = None) -> dict[tuple[str, str], PartitionStatus]:
        """Index freshness of every partition, or of one ``tenant``'s (which looks at that
        tenant's indexes only, as a search does)."""
        if tenant is None:
            return self._statuses.get()
        return {(s.tenant, s.month): s for s in self._statuses.of_tenant(tenant)}

    def embedder(self) -> Embedder:
        """The query embedder, created on first use (the model loads once per service)."""
        if self._embedder is None:
            source = self._embedder_source
            if source is None:
                from lake.embedding.factory import embedder_for

                # One intra-op thread: a service answers queries side by side.
                self._embedder = embedder_for(None, threads=1)
            elif isinstance(source, Embedder):
                self._embedder = source
            else:
                self._embedder = source()
        return self._embedder

    # -- steps --------------------------------------------------------------------------

    def _partitions(self, tenant: str, request: SearchRequest, *, fresh: bool
                    ) -> tuple[list[PartitionIndex], list[str], list[str]]:
        since_month = request.since.astimezone(UTC).strftime("%Y-%m") if request.since else None
        until_month = request.until.astimezone(UTC).strftime("%Y-%m") if request.until else None
        parts: list[PartitionIndex] = []
        stale: list[str] = []
        unindexed: list[str] = []
        for status in self._statuses.of_tenant(tenant, fresh=fresh):
            month = status.month
            if (since_month and month < since_month) or (until_month and month > until_month):
                continue
            if status.freshness == "missing":
                unindexed.append(status.name)
                continue
            if status.freshness == "stale":
                stale.append(status.name)
            if status.manifest is not None:
                parts.append(self._partition(status.manifest, reopen=fresh))
        return parts, stale, unindexed

    def _partition(self, manifest: PartitionManifest, *, reopen: bool = False) -> PartitionIndex:
        # a reopened view shares nothing with the one whose files went (previous: None)
        folder: Path | None = None

        def opened(previous: PartitionIndex | None) -> PartitionIndex:
            nonlocal folder
            folder = local_build(self.store.root, manifest)
            return PartitionIndex(folder, manifest) if previous is None \
                else previous.rebased(folder, manifest)

        def cost() -> int:
            assert folder is not None
            return partition_cost([folder.parent / name for name in manifest.live_segments],
                                  manifest.row_count)

        return self.partitions.get(manifest, opened, cost, reopen=reopen)

    def _embed_query(self, query: str) -> tuple[np.ndarray | None, str | None]:
        try:
            embedder = self.embedder()
            # One model call per query, of what the model reads of it: an embedder reads a
            # long row as the pool of all its passages, which for a pasted 100 KB log meant
            # ~400 calls (13 s).
            splitter = splitter_of(embedder)
            text = query if splitter is None else splitter.head(query)
            vector = embedder.encode([text])
        except EmbeddingError as exc:
            return None, str(exc)
        except Exception as exc:  # a provider fault must degrade search, not break it
            return None, f"{type(exc).__name__}: {exc}"
        query_vector = np.asarray(vector[0], dtype=np.float32)
        norm = float(np.linalg.norm(query_vector))
        if not np.isfinite(norm) or norm == 0.0:
            # A query without words has no direction: leave it to the text generators.
            return None, None
        return query_vector, None

    def _fuse(self, lists: dict[str, list[PartHits]], request: SearchRequest,
              as_of: datetime, stale: set[str], semantic_ran: bool,
              query_idf: dict[str, float], query: Query,
              query_vector: np.ndarray | None) -> tuple[list[Hit], int]:
        """The hits, and how many fused turns fell below the relevance floor."""
        named = query.named
        parts = _Parts([p for per_part in lists.values() for p, _, _ in per_part])
        ranked = {name: rows for name, per_part in lists.items()
                  if (rows := _best_rows(per_part, request.depth, parts)).docs.size}
        if not ranked:
            return [], 0
        fused = _fused(ranked, request, parts, query_idf, query)
        fused, neighbours = _smoothed(fused, parts, request.fusion.neighbour_weight)
        # Each turn is shown by its best row in the generator that ranks it highest (the
        # first such generator by name on equal ranks).
        best = _shown_rows(fused, [ranked[name] for name in fused.names])
        relevances = _judged(fused, ranked, semantic_ran, query, parts, query_idf,
                             neighbours)
        kept = relevances >= request.min_relevance
        turn_at_us = parts.turn_at_us(best.slots, best.docs)
        # A stale index may still hold turns purged or erased since it was built, but only
        # where the tables lost a file the index read: a partition whose tables only grew
        # since its build (a writer ahead of its indexer) serves no removed turn.
        removed = {p.name for p in parts.parts
                   if p.name in stale and self._statuses.may_have_removed(p.manifest)}
        cap = _per_conversation_cap(request)
        turns = fused.turns.tolist()
        scored = lifted_top(fused.values, kept, lambda j: parts.turn_key(turns[j]),
                            _lifts(request, as_of, turn_at_us, named), request.k, cap,
                            every=bool(removed))
        if removed:
            scored = self._without_removed(scored, [parts.parts[int(slot)]
                                                    for slot in best.slots], removed, as_of)
        hits = []
        values = fused.values.tolist()
        for s in itertools.islice(under_cap(scored, cap), request.k):
            j = s.position
            ranks: dict[str, GeneratorRank | None] = dict.fromkeys(GENERATORS)
            for g, name in enumerate(fused.names):
                rank = int(fused.ranks[g, j])
                if rank:
                    ranks[name] = GeneratorRank(
                        rank, float(ranked[name].scores[fused.rows[g, j]]))
            hits.append(self._hit(s.turn_key, parts.parts[int(best.slots[j])],
                                  int(best.docs[j]), ranks, values[j], s.lift, s.final,
                                  float(relevances[j]), request, query_vector))
        return hits, int(kept.size - np.count_nonzero(kept))

    def _without_removed(self, scored: list[Scored], part_at: list[PartitionIndex],
                         removed: set[str], as_of: datetime) -> list[Scored]:
        """``scored`` without the turns of the partitions named ``removed`` (stale, and
        their tables lost a file) whose TurnLog is no longer live; ``part_at[j]``: the
        partition of the turn at fused position ``j``."""
        suspects = {(part_at[s.position].manifest.tenant, s.turn_key[0]) for s in scored
                    if part_at[s.position].name in removed}
        live = self._live_turns(suspects, as_of) if suspects else set()
        return [s for s in scored if part_at[s.position].name not in removed
                or (part_at[s.position].manifest.tenant, *s.turn_key) in live]

    def _conversations_of(self, tenant: str, request: SearchRequest) -> frozenset[str] | None:
        """The tenant's conversations the request's agent and app recorded (None: no such
        filter), from their timelines."""
        if request.agent is None and request.app is None:
            return None
        if not self.store.exists(Table.TIMELINES):
            return frozenset()
        where = ds.field("tenant") == tenant
        if request.agent is not None:
            where &= ds.field("agent") == request.agent
        if request.app is not None:
            where &= ds.field("app") == request.app
        found = self.store.read(Table.TIMELINES, columns=["conversation_id"], filter=where)
        return frozenset(found["conversation_id"].to_pylist())

    def _live_turns(self, conversations: set[tuple[str, str]],
                    as_of: datetime) -> set[tuple[str, str, str]]:
        logs = self.store.read(Table.TURN_LOGS,
                               columns=["tenant", "conversation_id", "turn_id", "expires_at"],
                               filter=conversation_filter(conversations))
        return {(t, c, u) for t, c, u, e in zip(
            logs["tenant"].to_pylist(), logs["conversation_id"].to_pylist(),
            logs["turn_id"].to_pylist(), logs["expires_at"].to_pylist(), strict=True)
            if e > as_of}

    def _hit(self, turn_key: tuple[str, str], part: PartitionIndex, doc: int,
             ranks: dict[str, GeneratorRank | None], rrf: float, lift: float, final: float,
             relevance: float, request: SearchRequest, query: np.ndarray | None) -> Hit:
        cols = part.columns
        # single values from the decoded columns: slicing a row out of the Arrow table and
        # converting it whole costs ten times more
        turn_at = _EPOCH + timedelta(microseconds=int(cols.turn_at_us[doc]))
        return Hit(
            tenant=part.manifest.tenant, user_id=cols.users[cols.user_codes[doc]],
            conversation_id=turn_key[0], turn_id=turn_key[1], turn_at=turn_at,
            role=cols.roles[cols.role_codes[doc]], text=part.rows.column("text")[doc].as_py(),
            row_id=part.rows.column("row_id")[doc].as_py(), ranks=ranks, fused=rrf, lift=lift,
            score=final, relevance=relevance, snippets=self._snippets(part, doc, request, query))

    def _snippets(self, part: PartitionIndex, doc: int, request: SearchRequest,
                  query: np.ndarray | None) -> dict[str, str]:
        if request.snippets == "none":
            return {}
        start, roles, texts = _turn_rows(part, doc)
        embedder = self._embedder
        # another model's passages would be read by a query they cannot answer
        readable = query is not None and embedder is not None \
            and part.manifest.model == embedder.name
        return snippets(part, start, roles, texts, request.snippets,
                        query if readable else None,
                        splitter_of(embedder) if readable else None)


def _fused(ranked: dict[str, _Rows], request: SearchRequest, parts: _Parts,
           query_idf: dict[str, float], query: Query) -> FusedIds:
    """The generators' turn lists fused (lake.search.fusion), the lexical arm's vote for a
    turn weighed by how much of the query it holds (:func:`_coverage_weights`)."""
    f = request.fusion
    weights = {g: request.weights.get(g, 1.0) for g in ranked}
    row_weights = {"lexical": by_coverage} if "lexical" in ranked and (
        by_coverage := _coverage_weights(ranked["lexical"], parts, query_idf,
                                         f.coverage_gain, query)) is not None \
        else None
    return fuse_ids({name: (rows.turns, rows.scores) for name, rows in ranked.items()},
                    weights, k=f.k, method=f.method, score_factor=f.score_factor,
                    zscore_floor=f.zscore_floor, tie_key=parts.turn_key,
                    row_weights=row_weights)


def _smoothed(fused: FusedIds, parts: _Parts, weight: float
              ) -> tuple[FusedIds, tuple[np.ndarray, np.ndarray] | None]:
    """The fused turns each lifted by its conversation neighbours (lake.search.neighbours),
    reordered, with each turn's previous and following turn's position (None: ``weight`` 0,
    the list as it was)."""
    if weight <= 0:
        return fused, None
    moved, previous, following = smoothed(
        fused, *_neighbour_ids(fused, parts), weight,
        lends=_turn_bytes(fused.turns, parts) <= LONG_TURN_BYTES)
    return moved, (previous, following)


def _judged(fused: FusedIds, ranked: dict[str, _Rows], semantic_ran: bool, query: Query,
            parts: _Parts, query_idf: dict[str, float],
            neighbours: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Each fused turn's relevance (:func:`_relevances`), raised by its neighbours' where
    the list was smoothed and found by meaning (lake.search.neighbours)."""
    relevances, lenient = _relevances(fused, ranked, semantic_ran, query, parts, query_idf)
    if neighbours is not None and lenient:
        return neighbour_relevance(relevances, *neighbours)
    return relevances


def _relevances(fused: FusedIds, ranked: dict[str, _Rows], semantic_ran: bool, query: Query,
                parts: _Parts, query_idf: dict[str, float]) -> tuple[np.ndarray, bool]:
    """Each fused turn's relevance (lake.search.relevance), in fused order, and whether the
    list was :func:`~lake.search.relevance.found_by_meaning`; a query without a word
    (:func:`lake.search.relevance.reads_as_meaning`) by how much of it a turn holds literally
    (:func:`_literal_similarities`), never found by meaning."""
    def scores(name: str) -> np.ndarray:
        out = np.full(fused.turns.shape, np.nan)
        if name in fused.names:
            rows = fused.rows[fused.names.index(name)]
            found = rows >= 0
            out[found] = ranked[name].scores[rows[found]]
        return out

    if not query.meaning:
        return literal_relevance(
            _literal_similarities(fused, ranked, query, parts, scores("trigram"))), True
    semantic = scores("semantic") if semantic_ran else None
    by_meaning = semantic is None or found_by_meaning(semantic)
    coverage = None if by_meaning or "lexical" not in ranked or \
        len(query_idf) > SHORT_QUERY_STEMS else \
        _lexical_coverage(fused, ranked["lexical"], parts, query_idf, query)
    return (relevance(semantic, scores("lexical"), scores("trigram"), coverage=coverage),
            by_meaning)


def _literal_similarities(fused: FusedIds, ranked: dict[str, _Rows], query: Query,
                          parts: _Parts, trigram: np.ndarray) -> np.ndarray:
    """Per fused turn, how much of the query it holds literally: the trigram arm's word
    similarity (``trigram``), worked out from the row the lexical arm found where the trigram
    arm did not keep the turn (a code held by more rows than it keeps: equal scores keep the
    first rows), and 1 where a row either arm found holds the query's code, or one of its
    codes (:func:`lake.search.relevance.code_terms`), whole: its word similarity is 1, or it
    holds the code with other separators or none (lake.index.codes); NaN for a turn neither
    arm found."""
    out = trigram.copy()
    terms = list(query.code_terms)

    def found_rows(name: str) -> tuple[list[str], list[int]]:
        if name not in fused.names:
            return [], []
        arm, rows = ranked[name], fused.rows[fused.names.index(name)]
        positions = np.flatnonzero(rows >= 0).tolist()
        texts = [parts.row_text(int(arm.slots[rows[p]]), int(arm.docs[rows[p]]))
                 for p in positions]
        return texts, positions

    lexical_texts, lexical_positions = found_rows("lexical")
    unscored = [i for i, p in enumerate(lexical_positions) if np.isnan(out[p])]
    if unscored:
        out[[lexical_positions[i] for i in unscored]] = word_similarities(
            [query.text], [lexical_texts[i] for i in unscored])[0]
    trigram_texts, trigram_positions = found_rows("trigram")
    texts, positions = lexical_texts + trigram_texts, lexical_positions + trigram_positions
    if not texts:
        return out
    whole = holding_codes(terms or [query.text], texts)
    if terms:
        whole |= word_similarities(terms, texts, at_least=1.0).max(axis=0) >= 1.0
    out[np.array(positions, np.int64)[whole]] = 1.0
    return out


class _Parts:
    """The partitions of one search, numbered; a turn's id is (slot << 32) | its number in
    the partition (:attr:`RowColumns.turn_numbers`), so ids are unique across partitions."""

    def __init__(self, parts: list[PartitionIndex]) -> None:
        self.parts = list({id(p): p for p in parts}.values())
        self._slot = {id(p): i for i, p in enumerate(self.parts)}
        self._texts: dict[int, pa.ChunkedArray] = {}

    def slot(self, part: PartitionIndex) -> int:
        """The partition's number in this search."""
        return self._slot[id(part)]

    def turn_key(self, turn: int) -> tuple[str, str]:
        """(conversation id, turn id) of a turn id."""
        cols = self.parts[turn >> 32].columns
        doc = int(cols.turn_first_docs[turn & 0xFFFFFFFF])
        return (cols.conversations[cols.conversation_codes[doc]],
                cols.turn_names[cols.turn_codes[doc]])

    def row_text(self, slot: int, doc: int) -> str:
        """The text of one row ("" for none)."""
        column = self._texts.get(slot)
        if column is None:  # a column lookup by name costs as much as the value
            column = self._texts[slot] = self.parts[slot].rows.column("text")
        # one value at a time: take() on a column of several segments joins their chunks
        # first (1.2 ms for 2 rows of a 160k-row partition, against 5 µs)
        return column[doc].as_py() or ""

    def turn_at_us(self, slots: np.ndarray, docs: np.ndarray) -> np.ndarray:
        """The turn times (µs since the epoch) of rows given as (slot, doc) pairs."""
        out = np.empty(docs.size, np.int64)
        for slot in np.unique(slots).tolist():
            at = slots == slot
            out[at] = self.parts[slot].columns.turn_at_us[docs[at]]
        return out


class _Rows(NamedTuple):
    """One generator's best rows over all partitions, best first, as columns."""

    slots: np.ndarray
    docs: np.ndarray
    scores: np.ndarray
    turns: np.ndarray


def _best_rows(hits: list[PartHits], depth: int, parts: _Parts) -> _Rows:
    """A generator's best ``depth`` rows over all partitions, best first; equal scores keep
    partition order, then their order within the partition."""
    hits = [h for h in hits if h.docs]
    slots = np.concatenate([np.full(len(h.docs), parts.slot(h.part), np.int64) for h in hits]
                           or [np.zeros(0, np.int64)])
    docs = np.fromiter(itertools.chain.from_iterable(h.docs for h in hits), np.int64,
                       slots.size)
    scores = np.fromiter(itertools.chain.from_iterable(h.scores for h in hits), np.float64,
                         slots.size)
    turns = np.concatenate([parts.slot(h.part) << 32 | h.part.columns.turn_numbers[h.docs]
                            for h in hits] or [np.zeros(0, np.int64)])
    if len(hits) > 1:
        top = np.argsort(-scores, kind="stable")[:depth]
        return _Rows(slots[top], docs[top], scores[top], turns[top])
    return _Rows(slots[:depth], docs[:depth], scores[:depth], turns[:depth])


class _Shown(NamedTuple):
    """Per fused turn, the (slot, doc) of the row that shows it."""

    slots: np.ndarray
    docs: np.ndarray


def _shown_rows(fused: FusedIds, rows: list[_Rows]) -> _Shown:
    """Each fused turn's best row in the generator that ranks it highest, ties to the
    generator first by name (fused.names are sorted)."""
    ranks = np.where(fused.ranks > 0, fused.ranks, np.iinfo(np.int64).max)
    which = ranks.argmin(axis=0)
    slots = np.empty(which.size, np.int64)
    docs = np.empty(which.size, np.int64)
    for g, generator in enumerate(rows):
        at = which == g
        picked = fused.rows[g, at]
        slots[at], docs[at] = generator.slots[picked], generator.docs[picked]
    return _Shown(slots, docs)


def _validate(request: SearchRequest) -> None:
    if request.k < 1 or request.k > 1000:
        raise QueryError(f"k must be between 1 and 1000, not {request.k}")
    unknown = [r for r in request.roles if r not in ROLES]
    if unknown:
        raise QueryError(f"unknown role(s) {', '.join(unknown)}; roles are {', '.join(ROLES)}")
    # NaN passes every comparison; spelled out, so that a NaN weight is refused rather than
    # quietly switching its arm off
    for what, value in (("half-life days", request.half_life_days),
                        ("recency weight", request.recency_weight),
                        ("time weight", request.time_weight),
                        *((f"{name} weight", w) for name, w in request.weights.items())):
        if not math.isfinite(value) or value < 0:
            raise QueryError(f"{what} must be a finite number >= 0, not {value!r}")
    if request.max_per_conversation is not None and request.max_per_conversation < 0:
        raise QueryError("max per conversation must be >= 0 (0 = no cap)")
    if request.since and request.until and request.since >= request.until:
        raise QueryError("since must be before until")
    for name in (*request.enabled, *request.weights):
        if name not in GENERATORS:
            raise QueryError(f"unknown generator {name!r}; generators are "
                             f"{', '.join(GENERATORS)}")
    if not 0.0 <= request.min_relevance <= 1.0:
        raise QueryError(f"min relevance must be between 0 and 1, not {request.min_relevance}")
    check_neighbour_weight(request.fusion.neighbour_weight)
    gain = request.fusion.coverage_gain
    if not math.isfinite(gain) or gain < 0:
        raise QueryError(f"coverage gain must be a finite number >= 0, not {gain!r}")


def _coverage_weights(rows: _Rows, parts: _Parts, query_idf: dict[str, float], gain: float,
                      query: Query) -> np.ndarray | None:
    """Per lexical row, the multiplier of the arm's weight for its turn
    (lake.search.coverage); None when the query has no coverage or adaptation is off.

    A turn's coverage is read from the rows of it that the arm found (a row holding none of
    the query's stems is not found, so the others add nothing), and only for the arm's first
    COVERED_TURNS turns; the turns below them vote at the floor. Stemming every found turn
    whole cost ~1.5 ms a search on LoCoMo (60 turns, 19k characters); on its tune split the first
    20 gave recall within .003 of all of them at every k."""
    if gain == 0:
        return None
    turns = rows.turns.tolist()
    texts: dict[int, list[str]] = {}  # the first COVERED_TURNS turns, in the arm's order
    for turn, slot, doc in zip(turns, rows.slots.tolist(), rows.docs.tolist(), strict=True):
        if turn not in texts:
            if len(texts) == COVERED_TURNS:
                continue
            texts[turn] = []
        texts[turn].append(parts.row_text(slot, doc))
    shares = coverages(query_idf, turn_stems(query_idf.keys(),
                                             ["\n".join(t) for t in texts.values()],
                                             query.code_words))
    if shares is None:  # the query has no weighed stem
        return None
    multipliers = {turn: coverage_weight(share, gain)
                   for turn, share in zip(texts, shares, strict=True)}
    floor = coverage_weight(0.0, gain)
    return np.array([multipliers.get(t, floor) for t in turns])


def _lexical_coverage(fused: FusedIds, rows: _Rows, parts: _Parts,
                      query_idf: dict[str, float], query: Query) -> np.ndarray | None:
    """Per fused turn, the share of the query's weight held by the rows of it the lexical arm
    found (lake.search.coverage; NaN for a turn that arm did not find); None when the query
    has no weighed stem. A row holding none of the query's stems is not found, so the turn's
    other rows add nothing."""
    texts: dict[int, list[str]] = {}
    for turn, slot, doc in zip(rows.turns.tolist(), rows.slots.tolist(), rows.docs.tolist(),
                               strict=True):
        texts.setdefault(turn, []).append(parts.row_text(slot, doc))
    shares = coverages(query_idf, turn_stems(query_idf.keys(),
                                             ["\n".join(t) for t in texts.values()],
                                             query.code_words))
    if shares is None:
        return None
    held = dict(zip(texts, shares, strict=True))
    return np.array([held.get(t, np.nan) for t in fused.turns.tolist()], np.float64)


def _turn_bytes(turns: np.ndarray, parts: _Parts) -> np.ndarray:
    """Per turn id, how many UTF-8 bytes its rows' texts hold together."""
    out = np.zeros(turns.size, np.int64)
    slots = turns >> 32
    for slot in np.unique(slots).tolist():
        at = slots == slot
        part = parts.parts[slot]
        starts, ends = part.columns.turn_docs(turns[at] & 0xFFFFFFFF)
        before = part.text_bytes_before
        out[at] = before[ends] - before[starts]
    return out


def _neighbour_ids(fused: FusedIds, parts: _Parts) -> tuple[np.ndarray, np.ndarray]:
    """Per fused turn, the ids of its previous and next turn in its conversation (-1: none).
    They are looked up in the turn's own partition, so the first and last turn of a month
    lack the one across the month's edge."""
    previous = np.full(fused.turns.size, -1, np.int64)
    following = np.full(fused.turns.size, -1, np.int64)
    slots = fused.turns >> 32
    for slot in np.unique(slots).tolist():
        at = slots == slot
        before, after = parts.parts[slot].columns.turn_neighbours(fused.turns[at] & 0xFFFFFFFF)
        previous[at] = np.where(before >= 0, slot << 32 | before, -1)
        following[at] = np.where(after >= 0, slot << 32 | after, -1)
    return previous, following


def _lifts(request: SearchRequest, as_of: datetime, turn_at_us: np.ndarray,
           named: Sequence[NamedTime]) -> list[Lift]:
    """The lifts of each fused turn (turn times ``turn_at_us``): recency, and a turn in a
    time the query names lifted as a turn of age 0 would be, one outside as one whose age
    is its distance from that time (lake.search.named_time)."""
    ages = (int(as_of.timestamp() * _US) - turn_at_us) / _US
    lifts = [by_age(ages, request.half_life_days * 86400.0, request.recency_weight)]
    if named:
        lifts.append(by_age(seconds_outside(turn_at_us, [n.range for n in named]),
                            NAMED_TIME_HALF_LIFE_DAYS * 86400.0, request.time_weight))
    return lifts


def _per_conversation_cap(request: SearchRequest) -> int:
    if request.max_per_conversation is not None:
        return request.max_per_conversation
    return 0 if request.scope == "conversation" else 2


def _allowed_docs(part: PartitionIndex, scope: ResolvedScope, request: SearchRequest,
                  as_of: datetime, conversations: frozenset[str] | None = None) -> np.ndarray:
    """Sorted doc ids of the partition rows the request may see, of ``conversations`` only
    when given."""
    def micros(at: datetime | None) -> int | None:
        return None if at is None else int(at.timestamp() * _US)

    docs: np.ndarray = part.columns.visible_docs(
        user_id=scope.user_id, conversation_id=scope.conversation_id, roles=request.roles,
        since_us=micros(request.since), until_us=micros(request.until),
        as_of_us=int(as_of.timestamp() * _US))
    if conversations is None or not docs.size:
        return docs
    index = part.columns.conversation_index
    codes = np.array([index[c] for c in conversations if c in index], dtype=np.int64)
    kept: np.ndarray = docs[np.isin(part.columns.conversation_codes[docs], codes)]
    return kept


def _turn_rows(part: PartitionIndex, doc: int) -> tuple[int, list[str], list[str]]:
    """The first doc of the turn that ``doc`` belongs to, and the roles and texts of every row
    of it, in doc order."""
    cols = part.columns
    starts, ends = cols.turn_docs(cols.turn_numbers[[doc]])
    start, end = int(starts[0]), int(ends[0])
    names = cols.roles
    return (start, [names[c] for c in cols.role_codes[start:end].tolist()],
            [t or "" for t in part.rows.column("text").slice(start, end - start).to_pylist()])


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


def _timed(run: Callable[[], list[PartHits]]) -> tuple[list[PartHits], float]:
    """An arm's hits and the milliseconds it took."""
    started = time.perf_counter()
    return run(), _ms(started)


def _forget_arm_pool() -> None:
    """In a forked child the pool's threads do not exist: it makes its own on first use."""
    global _ARM_POOL
    _ARM_POOL = None


os.register_at_fork(after_in_child=_forget_arm_pool)


def _arm_pool() -> ThreadPoolExecutor:
    """The threads wide searches run their semantic arm on, one per CPU this process may use
    (shared by every service of the process; made on first use)."""
    global _ARM_POOL
    with _ARM_POOL_LOCK:
        if _ARM_POOL is None:
            _ARM_POOL = ThreadPoolExecutor(max_workers=len(os.sched_getaffinity(0)),
                                           thread_name_prefix="turnlake-search-arm")
        return _ARM_POOL

