"""``turnlake maintain``: table upkeep after many small commits.

Every ingest commits a few small Parquet files per partition and one Delta log entry per
table, so a lake fed turn by turn ends up with thousands of both and every scan pays for
them. Maintenance runs, under the writer lock like any writer::

    1. recover    batches a crashed ingest left, and interrupted purges and erasures, are
                  finished first (an erasure's own vacuum removes the erased bytes); then
                  turn_logs rows written before ``completion_status`` existed get it from
                  their stored payload (pipeline/completion_backfill.py; once per row)
    2. compact    per table and partition, small data files are rewritten into a few large
                  ones (one commit each that changes no row)
    3. indexes    partitions whose index went stale (compaction renames every file the
                  fingerprints hash) are rebuilt, each with the model it was built with
    4. clean up   per table a checkpoint; then, after a grace period, vacuum (files no
                  current version needs, and files no commit ever referenced) and drop the
                  log entries older than the checkpoint

Each step is idempotent, so a run killed anywhere is finished by the next one: compaction has
nothing left to merge in partitions already compacted, stale indexes are still stale, and
vacuum removes whatever is still unreferenced.

Readers never take the lock. A reader that opened a table before a compaction commit or the
checkpoint reads the files and log entries of that version; they stay on disk for
``grace_s`` after the lake's newest commit, so a search in flight finishes. The versions
index builds pin are kept by holding the index lock while cleaning up. Nothing maintenance
writes comes from an older version than the current one, so an erased row never comes back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lake.batches import BatchCommitter, RecoveryReport
from lake.deletion.plan import DeletionPlan
from lake.deletion.runner import DeletionOutcome, DeletionRunner
from lake.embedding.factory import embedding_identity
from lake.faults import NO_FAULTS, Faults
from lake.filestore import FileStore
from lake.index.status import partition_statuses
from lake.location import LakeLocation
from lake.locks import Waiting, index_lock, writer_lock
from lake.refs import validate_id
from lake.settings import Settings
from lake.store import COMPACT_TARGET_BYTES, FileStats, LakeStore, Partition
from lake.tables import PARTITIONS, Table
from pipeline.completion_backfill import fill_completion_status, unrecorded
from pipeline.index_build import compact_indexes, stale_partitions
from pipeline.retention import index_rebuilder

Progress = Callable[[str, int, int], None]
DEFAULT_GRACE_S = 30.0  # longer than any search's table read takes on a busy machine
_INDEXED = (Table.CONTENT_ROWS, Table.TURN_LOGS)  # the tables partition indexes hash


@dataclass(frozen=True)
class PartitionUpkeep:
    """One partition of one table: its data files before and after compaction."""

    table: Table
    partition: tuple[str, ...]
    before: FileStats
    after: FileStats | None = None  # None in a dry run

    @property
    def name(self) -> str:
        """``tenant/month`` (``tenant`` for timelines, ``*`` for an unpartitioned table)."""
        return "/".join(self.partition) or "*"


@dataclass
class TableUpkeep:
    """What maintenance did (or would do) to one table."""

    table: Table
    version_before: int | None
    log_files_before: int
    files_before: FileStats
    compacted: list[PartitionUpkeep] = field(default_factory=list)
    vacuumable: int = 0  # data files on disk no current version reads: vacuumed, unless dry
    version_after: int | None = None
    log_files_after: int | None = None
    files_after: FileStats | None = None

    @property
    def to_vacuum(self) -> int:
        """A dry run's count of the files the run would vacuum, at most: those no version
        reads now, and every file of the partitions it would compact (compaction replaces
        them, and the vacuum that follows removes them)."""
        return self.vacuumable + sum(part.before.files for part in self.compacted)


@dataclass
class MaintainReport:
    """A maintenance run, or its plan for a dry run."""

    dry_run: bool
    tables: list[TableUpkeep] = field(default_factory=list)
    indexes: list[str] = field(default_factory=list)  # rebuilt, or to rebuild (dry run)
    recovered: RecoveryReport | None = None
    resumed: list[DeletionOutcome] = field(default_factory=list)
    pending: list[DeletionPlan] = field(default_factory=list)  # dry run: left to finish
    waited_s: float = 0.0
    seconds: float = 0.0
    # Groups of recordings stopped servers acknowledged and did not commit (their spools,
    # pipeline/service/spool.py): committed by the run, or counted by a dry run.
    spooled: int = 0
    spool_problems: list[str] = field(default_factory=list)  # group files that do not read
    # turn_logs rows given the completion_status their payload records (a dry run: to give)
    statuses_filled: int = 0


def _total(stats: dict[tuple[str, ...], FileStats]) -> FileStats:
    return FileStats(sum(s.files for s in stats.values()), sum(s.bytes for s in stats.values()),
                     sum(s.rows for s in stats.values()))


def _mine(table: Table, partition: tuple[str, ...], tenant: str | None) -> bool:
    """Whether ``--tenant`` covers a partition; unpartitioned tables hold every tenant's rows
    and are left alone by a one-tenant run."""
    if tenant is None:
        return True
    return bool(PARTITIONS[table]) and partition[0] == tenant


def _plan_table(store: LakeStore, table: Table, tenant: str | None) -> TableUpkeep:
    stats = store.file_stats(table)
    upkeep = TableUpkeep(table, store.version(table), store.log_files(table), _total(stats))
    # One file cannot be merged with anything; deltalake would skip it anyway.
    upkeep.compacted = [PartitionUpkeep(table, part, s) for part, s in sorted(stats.items())
                        if s.files > 1 and _mine(table, part, tenant)]
    upkeep.vacuumable = len(store.vacuumable(table))
    return upkeep


def _stale_indexes(store: LakeStore, tenant: str | None) -> set[Partition]:
    """The stale partition indexes (:func:`stale_partitions`) of ``tenant``, or all."""
    return {part for part in stale_partitions(store) if tenant is None or part[0] == tenant}


def refresh_indexes(store: LakeStore, settings: Settings, *, tenant: str | None,
                    on_partition: Progress | None = None) -> list[str]:
    """The index step of maintenance: bring every stale partition index (of ``tenant``) up to
    date; returns the partitions rebuilt, as ``tenant/month``.

    Compaction rewrites files without changing rows, but index freshness is a hash of each
    partition's file set, so the compacted partitions read as stale until rebuilt here; then
    every partition left with more than one index segment is compacted into a new base.
    """
    stale = _stale_indexes(store, tenant)
    if stale:
        index_rebuilder(store, settings, on_partition)(stale)
    # Partitions fed turn by turn collect delta segments: merge them into one base each.
    compacted = compact_indexes(store, model=embedding_identity(settings), tenant=tenant,
                                on_partition=on_partition).compacted
    return sorted({f"{t}/{m}" for t, m in stale} | set(compacted))


def maintain(settings: Settings, *, tenant: str | None = None, dry_run: bool = False,
             grace_s: float = DEFAULT_GRACE_S, target_bytes: int = COMPACT_TARGET_BYTES,
             faults: Faults = NO_FAULTS, on_wait: Waiting | None = None,
             on_partition: Progress | None = None, on_index: Progress | None = None,
             on_table: Progress | None = None, on_status: Progress | None = None,
             sleep: Callable[[float], None] = time.sleep) -> MaintainReport:
    """Compact small files, refresh stale indexes, vacuum and truncate the Delta logs.

    First, on a folder lake, commit the recordings that stopped servers acknowledged and left
    in their spools (every tenant's: they were answered; a dry run counts them).

    ``tenant`` limits compaction and index refresh to that tenant's partitions; vacuum and
    log cleanup act on whole tables. A dry run takes no lock and writes nothing.
    ``grace_s`` is how long replaced files outlive the last commit, for readers in flight.
    ``on_wait(holder)`` is told when another writer holds the lock; ``on_partition``,
    ``on_index`` and ``on_table`` report progress of the three steps, ``on_status`` that of
    filling old rows' completion status; ``sleep`` waits out
    the grace (a seam for tests). Fault points: ``maintain.after_partition``,
    ``maintain.after_compact``, ``maintain.after_indexes``, ``maintain.after_vacuum``.
    """
    started = time.perf_counter()
    if tenant is not None:
        validate_id(tenant, "tenant")
    store = LakeStore(settings.lake)
    report = MaintainReport(dry_run=dry_run)
    runner = DeletionRunner(store, settings, rebuild=index_rebuilder(store, settings, on_index))
    if not store.root.remote:
        from pipeline.service.spool import orphaned, recover_orphans

        lake = LakeLocation.of(settings.lake).local
        committed = 0 if dry_run else recover_orphans(settings).groups
        left = orphaned(lake)  # a dry run counts them all; a run, what would not read
        report.spooled = left.groups if dry_run else committed
        report.spool_problems = left.problems
    if dry_run:
        report.pending = runner.pending()
        unfilled = unrecorded(store, tenant)
        report.statuses_filled = sum(unfilled.values())
        report.tables = [_plan_table(store, t, tenant) for t in Table if store.exists(t)]
        compacted = {(u.partition[0], u.partition[1]) for t in report.tables
                     if t.table in _INDEXED for u in t.compacted} | set(unfilled)
        indexed = {part for part, status in partition_statuses(store).items()
                   if status.manifest is not None}
        report.indexes = [f"{t}/{m}" for t, m in
                          sorted(_stale_indexes(store, tenant) | (compacted & indexed))]
        report.seconds = time.perf_counter() - started
        return report
    with writer_lock(store.root, timeout_s=settings.lock_timeout_s, job="turnlake maintain",
                     on_wait=on_wait):
        report.recovered = BatchCommitter(store, FileStore(store.root)).recover()
        report.resumed = runner.resume()
        # Before compaction, which then merges the rewritten files with the rest.
        report.statuses_filled = fill_completion_status(store, tenant=tenant,
                                                        on_partition=on_status)
        report.tables = [_plan_table(store, t, tenant) for t in Table if store.exists(t)]
        _compact(store, report.tables, target_bytes, faults, on_partition)
        faults.hit("maintain.after_compact")
        report.indexes = refresh_indexes(store, settings, tenant=tenant, on_partition=on_index)
        faults.hit("maintain.after_indexes")
        report.waited_s = _clean_up(store, report.tables, grace_s, faults, on_table, sleep)
    report.seconds = time.perf_counter() - started
    return report


def _compact(store: LakeStore, tables: list[TableUpkeep], target_bytes: int, faults: Faults,
             on_partition: Progress | None) -> None:
    total = sum(len(t.compacted) for t in tables)
    done = 0
    for upkeep in tables:
        for part in upkeep.compacted:
            store.compact(upkeep.table, part.partition, target_bytes=target_bytes)
            faults.hit("maintain.after_partition")
            done += 1
            if on_partition is not None:
                on_partition(f"{upkeep.table.value} {part.name}", done, total)
        after = store.file_stats(upkeep.table)
        upkeep.compacted = [PartitionUpkeep(p.table, p.partition, p.before,
                                            after.get(p.partition, FileStats()))
                            for p in upkeep.compacted]


def _clean_up(store: LakeStore, tables: list[TableUpkeep], grace_s: float, faults: Faults,
              on_table: Progress | None, sleep: Callable[[float], None]) -> float:
    """Checkpoint, then vacuum and truncate the log of every table; returns the seconds
    waited for readers."""
    # Under the index lock: a concurrent index build reads its partitions at the versions it
    # pinned, whose files and log entries this step removes.
    with index_lock(store.root, job="turnlake maintain"):
        for upkeep in tables:
            store.checkpoint(upkeep.table)
        # A reader that opened a table before the compaction (or before the checkpoint) may
        # still read the files and log entries of that version; the grace lets it finish.
        # Readers opening after the checkpoint need neither.
        newest = max((at for t in tables if (at := store.committed_at(t.table)) is not None),
                     default=None)
        waited = 0.0
        if newest is not None and grace_s > 0:
            waited = max(0.0, newest + grace_s - time.time())
            if waited > 0:
                sleep(waited)
        for i, upkeep in enumerate(tables, start=1):
            # The same vacuum and log truncation an erasure ends with (lake.deletion.runner): files
            # holding erased or purged rows that are still on disk go here as well.
            upkeep.vacuumable = len(store.vacuumable(upkeep.table))
            store.vacuum(upkeep.table, full=True)
            store.cleanup_log(upkeep.table)
            faults.hit("maintain.after_vacuum")
            upkeep.version_after = store.version(upkeep.table)
            upkeep.log_files_after = store.log_files(upkeep.table)
            upkeep.files_after = _total(store.file_stats(upkeep.table))
            if on_table is not None:
                on_table(upkeep.table.value, i, len(tables))
    return waited
