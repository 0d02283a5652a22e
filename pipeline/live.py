"""The warm write path: record turns into a lake from a long-running host, searchable at once.

    writer = LiveWriter(settings)                 # once, at host start
    report = writer.record([record])              # at every turn boundary

A ``LiveWriter`` keeps what a one-shot ``turnlake ingest`` opens each time: the lake store,
the ingestor and the embedding model (loaded on the first turn, then reused). Each
``record`` call ingests the records in one batch, embeds their rows, and gives each partition
they touched a delta segment of just those rows (lake.index.delta), so the cost of a turn
depends on the turn, not on the size of the partition it lands in. Past the compaction
thresholds of the settings, a partition is merged into a new base segment on the way.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from lake.embedding.base import Embedder
from lake.embedding.factory import embedder_from, embedding_identity
from lake.embedding.reuse import Embedded, VectorReuse
from lake.embedding.rows import embed_rows
from lake.faults import NO_FAULTS, Faults
from lake.index.deferred import deferred_turns
from lake.records import TurnRecord
from lake.settings import Settings
from lake.store import LakeStore, Partition
from lake.tables import Table
from pipeline.conflicts import advised
from pipeline.index_build import (
    BackgroundRebases,
    BuildReport,
    Compaction,
    PartitionBuilder,
    build_in_process,
    build_indexes,
)
from pipeline.ingest import Ingestor
from pipeline.jobs import EmbedTally, IngestJobReport, embedding_hook
from pipeline.prepare import PreparedGroup

# Vectors computed ahead of an ingest: per tenant, by text digest (lake.embedding.reuse).
Vectors = dict[str, dict[bytes, Embedded]]

# What record() advises on a conflict: LiveWriter has no replace option, but a turn erased is
# recorded anew.
LIBRARY_ADVICE = ("; LiveWriter does not replace a recorded turn: erase it first "
                  "(pipeline.retention.erase) to record this version")


class LiveWriter:
    """Records turns into one lake, keeping the store, ingestor and model warm across calls.

    Contract:

    * ``record(records)`` ingests the given ``turnlake.turn.v1`` records (models, JSON
      strings or dicts) as one batch under the lake's writer lock, embeds their rows with
      ``embedder`` (default: the settings' model; ``embed=False``: none, rows stay
      ``pending`` for ``turnlake embed --backfill``), then publishes a delta segment for every
      partition the batch touched, under the index lock. When it returns, the turns are
      findable by any :class:`lake.search.service.SearchService` on the lake.
    * ``record`` is :meth:`ingest` then :meth:`index`; a host that answers once the turns are
      durable and indexes behind (the service's group writer) calls the two itself, from two
      threads if it likes: ingests are serialized among themselves, and so are index builds.
    * Each report names the turns it kept (``report.ingest.kept``).
    * Bad records are quarantined and reported in ``report.ingest.quarantined``, as by
      ``turnlake ingest``. A record of a turn stored with other content is a conflict
      (also in ``report.ingest.conflicts``): LiveWriter does not replace a recorded turn, so
      ``record`` says to erase it first (:data:`LIBRARY_ADVICE`), where :meth:`ingest`
      leaves the advice to its host (the HTTP service gives its own). An embedding failure
      leaves rows for text search (``report.embedding``); lake errors raise
      :class:`lake.errors.TurnlakeError`.
    * Other processes may write the same lake: the locks order them.
    * With ``background_rebase``, a partition whose delta segments outgrew its base is
      rebased in a thread of its own while later index steps keep publishing deltas (local
      lakes; see lake.index.rebase), so no turn waits behind a full build of its partition
      to become searchable. :meth:`wait_rebases` waits for those running.
    """

    def __init__(self, settings: Settings, embedder: Embedder | None = None, *,
                 embed: bool = True, faults: Faults = NO_FAULTS,
                 background_rebase: bool = False) -> None:
        self.settings = settings
        self._provider = (embedder or embedder_from(settings)) if embed else None
        self._model = (self._provider.name if self._provider is not None
                       else embedding_identity(settings))
        # One store for the ingest and the index builds: it keeps the tables' newest
        # snapshots, which the builds read right after the ingest wrote them.
        self._store = LakeStore(settings.lake)
        self._tally = EmbedTally()
        self._reuse = (VectorReuse(self._store, self._provider.name,
                                   load_after=settings.embed_reuse_min_texts)
                       if self._provider is not None else None)
        embed_rows = (embedding_hook(self._provider, settings, lambda: self._tally,
                                     reuse=self._reuse)
                      if self._provider is not None else None)
        # A host's batches are its turns: small enough to name the kept ones.
        self._ingestor = Ingestor(settings, faults=faults, store=self._store,
                                  rows_hook=embed_rows, report_kept=True)
        self._compaction = Compaction.of(settings)
        self._faults = faults
        self._ingest_lock = threading.Lock()
        self._index_lock = threading.Lock()
        self._rebases = (BackgroundRebases(self._store, model=self._model,
                                           serialize=self._index_lock, faults=faults,
                                           defer_bytes=settings.index_defer_bytes or None,
                                           compaction=self._compaction)
                         if background_rebase else None)

    @property
    def model(self) -> str:
        """The embedding identity the index builds use."""
        return self._model

    def record(self, records: Sequence[TurnRecord | str | dict[str, Any]]) -> IngestJobReport:
        """Ingest, embed and index ``records``; see the class notes for the contract."""
        ingested = self.ingest(records)
        report = ingested.ingest
        report.conflicts = [advised(q, LIBRARY_ADVICE) for q in report.conflicts]
        report.quarantined = [advised(q, LIBRARY_ADVICE) for q in report.quarantined]
        build = self.index(report.partitions) if report.partitions else None
        return IngestJobReport(report, ingested.embedding, build)

    def ingest(self, records: Sequence[TurnRecord | str | dict[str, Any]], *,
               source: str = "<live>") -> IngestJobReport:
        """Ingest and embed ``records`` as one batch, without indexing them (``build`` is
        None); the turns are durable when it returns. Conflicts carry no advice (see the
        class notes)."""
        lines = [r if isinstance(r, TurnRecord | str) else json.dumps(r) for r in records]
        with self._ingest_lock:
            self._tally = EmbedTally()
            report = self._ingestor.ingest_records(lines, source=source)
            return IngestJobReport(report, self._tally, None)

    def ingest_groups(self, groups: Sequence[tuple[str, Sequence[str]]]) -> IngestJobReport:
        """:meth:`ingest` of several groups of JSON lines, each under its own source name (as
        :meth:`pipeline.ingest.Ingestor.ingest_groups`), in one run."""
        with self._ingest_lock:
            self._tally = EmbedTally()
            report = self._ingestor.ingest_groups(groups)
            return IngestJobReport(report, self._tally, None)

    def ingest_prepared(self, groups: Iterable[PreparedGroup], *,
                        vectors: Vectors | None = None) -> IngestJobReport:
        """:meth:`ingest_groups` of groups prepared already (by the ingest's decision: see
        :meth:`pipeline.ingest.Ingestor.ingest_prepared`); ``vectors`` (from
        :meth:`embed_ahead` of the same groups) are used instead of embedding their texts."""
        if vectors and self._reuse is not None:
            for tenant, known in vectors.items():
                for digest, embedded in known.items():
                    self._reuse.remember(tenant, digest, embedded.vector, embedded.passages)
        with self._ingest_lock:
            self._tally = EmbedTally()
            report = self._ingestor.ingest_prepared(groups)
            return IngestJobReport(report, self._tally, None)

    def index(self, partitions: set[Partition], *,
              builder: PartitionBuilder = build_in_process, defer: bool = True
              ) -> BuildReport:
        """Bring the given partitions' indexes up to date: a delta segment of their new rows,
        compaction past the settings' thresholds (full rebuilds run through ``builder``).
        With ``background_rebase`` and ``defer``, a new data file larger than the settings'
        ``index_defer_bytes`` is indexed in the background (``report.deferring``; see
        pipeline.index_build.build_indexes); ``defer=False`` indexes everything now."""
        rebases = self._rebases
        with self._index_lock:
            return build_indexes(self._store, model=self._model, partitions=set(partitions),
                                 faults=self._faults, compaction=self._compaction,
                                 builder=builder, rebases=rebases,
                                 defer_bytes=rebases.defer_bytes
                                 if rebases is not None and defer else None)

    def embed_ahead(self, group: PreparedGroup) -> Vectors:
        """The vectors of the texts the rows of ``group`` would carry, per tenant and text
        digest (lake.embedding.reuse), computed without any lock: a later
        :meth:`ingest_prepared` of the same group given them embeds nothing. Empty without
        an embedder or when embedding failed (the ingest then embeds as usual)."""
        if self._provider is None:
            return {}
        rows = [chunk.tables[Table.CONTENT_ROWS] for _, chunk in group.chunks
                if Table.CONTENT_ROWS in chunk.tables]
        if not rows or not sum(r.num_rows for r in rows):
            return {}
        ahead = VectorReuse(self._store, self._provider.name, load_after=2**62)
        embed_rows(pa.concat_tables(rows), self._provider,
                   batch_size=self.settings.embed_batch_size, reuse=ahead)
        return ahead.remembered()

    def deferred_turns(self, report: BuildReport) -> set[tuple[str, str, str]]:
        """The turns (tenant, conversation id, turn id) whose rows the index step that gave
        ``report`` left to its background builds (see :meth:`index`)."""
        return {(m.tenant, conversation, turn) for m in report.built
                for conversation, turn in deferred_turns(self._store, m)}

    def warm(self) -> None:
        """Load now what the first :meth:`ingest` and :meth:`index` would load: the model
        (when embedding) and the lake's tables, so the first turn of a host is as fast as
        the next ones."""
        if self._provider is not None:
            self._provider.encode(["warm up"])
        self._store.warm()

    def wait_rebases(self, timeout_s: float | None = None) -> bool:
        """Wait for the background rebases running (none without ``background_rebase``);
        True when none is left running."""
        return self._rebases.wait(timeout_s) if self._rebases is not None else True
