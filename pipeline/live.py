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
from collections.abc import Sequence
from typing import Any

from lake.embedding.base import Embedder
from lake.embedding.factory import embedder_from, embedding_identity
from lake.faults import NO_FAULTS, Faults
from lake.records import TurnRecord
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.index_build import Compaction, build_indexes
from pipeline.ingest import Ingestor
from pipeline.jobs import EmbedTally, IngestJobReport, embedding_hook


class LiveWriter:
    """Records turns into one lake, keeping the store, ingestor and model warm across calls.

    Contract:

    * ``record(records)`` ingests the given ``turnlake.turn.v1`` records (models, JSON
      strings or dicts) as one batch under the lake's writer lock, embeds their rows with
      ``embedder`` (default: the settings' model; ``embed=False``: none, rows stay
      ``pending`` for ``turnlake embed --backfill``), then publishes a delta segment for every
      partition the batch touched, under the index lock. When it returns, the turns are
      findable by any :class:`lake.search.service.SearchService` on the lake.
    * Bad records are quarantined and reported in ``report.ingest.quarantined``, as by
      ``turnlake ingest``; an embedding failure leaves rows for text search
      (``report.embedding``); lake errors raise :class:`lake.errors.TurnlakeError`.
    * Calls are serialized within the process (one at a time, from any thread); other
      processes may write the same lake, the locks order them.
    """

    def __init__(self, settings: Settings, embedder: Embedder | None = None, *,
                 embed: bool = True, faults: Faults = NO_FAULTS) -> None:
        self.settings = settings
        self._provider = (embedder or embedder_from(settings)) if embed else None
        self._model = (self._provider.name if self._provider is not None
                       else embedding_identity(settings))
        self._store = LakeStore(settings.lake)
        self._tally = EmbedTally()
        # One store for the ingest and the index builds: it keeps the tables' newest
        # snapshots, which the builds read right after the ingest wrote them.
        self._ingestor = Ingestor(settings, faults=faults, store=self._store, rows_hook=(
            embedding_hook(self._provider, settings, lambda: self._tally)
            if self._provider is not None else None))
        self._compaction = Compaction.of(settings)
        self._faults = faults
        self._lock = threading.Lock()

    def record(self, records: Sequence[TurnRecord | str | dict[str, Any]]) -> IngestJobReport:
        """Ingest, embed and index ``records``; see the class notes for the contract."""
        lines = [r if isinstance(r, TurnRecord | str) else json.dumps(r) for r in records]
        with self._lock:
            self._tally = EmbedTally()
            report = self._ingestor.ingest_records(lines, source="<live>")
            build = None
            if report.partitions:
                build = build_indexes(self._store, model=self._model,
                                      partitions=report.partitions, faults=self._faults,
                                      compaction=self._compaction)
            return IngestJobReport(report, self._tally, build)
