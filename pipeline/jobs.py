"""Jobs that chain the pipeline steps the way the CLI runs them: ingest → embed → index."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from lake.embedding.base import Embedder
from lake.embedding.factory import embedder_from, embedding_identity
from lake.embedding.reuse import VectorReuse
from lake.embedding.rows import embed_rows
from lake.faults import NO_FAULTS, Faults
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.index_build import BuildReport, Compaction, build_indexes, stale_partitions
from pipeline.ingest import Ingestor, IngestReport
from pipeline.retention import Settle
from pipeline.supersede import supersede


@dataclass
class EmbedTally:
    """Embedding outcomes across an ingest's batches."""

    embedded: int = 0
    failed: int = 0
    reused: int = 0  # rows whose vector was not computed (a duplicate, or already in the lake)
    errors: list[str] = field(default_factory=list)


@dataclass
class IngestJobReport:
    """An ingest run with its embedding and index-build outcomes."""

    ingest: IngestReport
    embedding: EmbedTally
    build: BuildReport | None


def run_ingest(settings: Settings, paths: Sequence[Path] | None = None, *,
               records: Sequence[object] | None = None, embed: bool = True,
               index: bool = True, embedder: Embedder | None = None,
               faults: Faults = NO_FAULTS, on_line: Callable[[int], None] | None = None,
               on_embedded: Callable[[int], None] | None = None,
               on_partition: Callable[[str, int, int], None] | None = None,
               workers: int = 1, replace: bool = False, keep_stored: bool = False,
               settle: Settle | None = None) -> IngestJobReport:
    """Ingest files (or in-memory records), embedding new rows and building touched partitions.

    Embedding is best effort: when the provider fails the rows are written with status
    ``failed`` and the run goes on; ``turnlake embed --backfill`` retries them later.
    With ``replace``, turns stored with other content are superseded
    (:func:`pipeline.supersede.supersede`, whose erasures run ``settle`` first); with
    ``keep_stored``, they are left as stored and listed in the report's ``held`` (neither
    quarantined nor superseded).
    """
    tally = EmbedTally()
    provider = (embedder or embedder_from(settings)) if embed else None
    hook = embedding_hook(provider, settings, lambda: tally, on_embedded) if provider else None
    ingestor = Ingestor(settings, faults=faults, rows_hook=hook, progress=on_line,
                        workers=workers)
    if records is not None:
        report = ingestor.ingest_records(
            records, hold_conflicts=replace or keep_stored)  # type: ignore[arg-type]
    else:
        report = ingestor.ingest_paths(list(paths or []), hold_conflicts=replace or keep_stored)
    if replace:
        supersede(settings, ingestor, report, settle=settle)
    build = None
    store = LakeStore(settings.lake)
    touched = set(report.partitions)
    if index and report.recovered:
        # A crashed run's batches, finished or rolled back by this one, changed partitions
        # this run may not have touched (re-running a killed ingest accepts nothing new).
        touched |= stale_partitions(store)
    if index and touched:
        build = build_indexes(store, model=provider.name if provider else
                              _model_name(settings), partitions=touched,
                              on_partition=on_partition, compaction=Compaction.of(settings))
    return IngestJobReport(report, tally, build)


def ingest_groups(settings: Settings, groups: Sequence[tuple[str, Sequence[str]]]
                  ) -> IngestReport:
    """Ingest groups of JSON lines, each under its own source name, in one run, embedding
    their rows (:meth:`pipeline.ingest.Ingestor.ingest_groups`): how the spools of stopped
    servers are committed outside a serving writer (pipeline.service.spool.recover_orphans).
    Indexes are left to the caller."""
    provider = embedder_from(settings)
    tally = EmbedTally()
    hook = embedding_hook(provider, settings, lambda: tally)
    return Ingestor(settings, rows_hook=hook).ingest_groups(groups)


def embedding_hook(provider: Embedder, settings: Settings, tally: Callable[[], EmbedTally],
                   on_embedded: Callable[[int], None] | None = None,
                   reuse: VectorReuse | None = None) -> Callable[[pa.Table], pa.Table]:
    """The ingest rows hook that embeds each batch's rows, counting into ``tally()``; vectors
    the lake already holds for the same text, tenant and identity are reused (through
    ``reuse`` when given: a caller may add vectors it computed ahead)."""
    reuse = reuse or VectorReuse(LakeStore(settings.lake), provider.name,
                                 load_after=settings.embed_reuse_min_texts)

    def hook(rows: pa.Table) -> pa.Table:
        embedded, outcome = embed_rows(rows, provider, batch_size=settings.embed_batch_size,
                                       on_progress=None, reuse=reuse)
        counts = tally()
        counts.embedded += outcome.embedded
        counts.reused += outcome.reused
        counts.failed += outcome.failed
        if outcome.error:
            counts.errors.append(outcome.error)
        if on_embedded is not None:
            on_embedded(rows.num_rows)
        return embedded
    return hook


def _model_name(settings: Settings) -> str:
    return embedding_identity(settings)
