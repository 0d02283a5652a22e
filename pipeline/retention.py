"""Retention jobs: apply the policy to stored rows, purge what expired, erase on request.

Every job that writes takes the lake's writer lock, first rolls back or finishes batches a
crashed ingest left (``BatchCommitter.recover``) and finishes interrupted purges and erasures
(``DeletionRunner.resume``). Dry runs take no lock and write nothing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import polars as pl
import pyarrow.dataset as ds

from lake.batches import BatchCommitter
from lake.deletion.audit import AuditEntry, write_audit
from lake.deletion.plan import DeletionPlan, in_chunks, plan_erase, plan_purge
from lake.deletion.policy import policy_expiry, with_record_ttl
from lake.deletion.runner import DeletionOutcome, DeletionRunner, StepProgress
from lake.deletion.target import ErasureTarget
from lake.embedding.factory import embedding_identity
from lake.errors import IndexUnavailable
from lake.faults import NO_FAULTS, Faults
from lake.filestore import FileStore
from lake.index.manifest import read_current
from lake.index.status import partition_statuses
from lake.locks import writer_lock
from lake.settings import Settings
from lake.store import LakeStore, Partition
from lake.tables import Table
from lake.timelines import refresh_timelines
from pipeline.index_build import build_indexes

PartitionProgress = Callable[[str, int, int], None]
# The step an erasure runs before it reads the tables, given by its front end: commit every
# recording a server already acknowledged (pipeline.service.spool.settler), so that none is
# committed after the erasure and outlives it.
Settle = Callable[[], None]
_ROW_TABLES = (Table.CONTENT_ROWS, Table.EVENTS, Table.FILES)
_TURN = ("conversation_id", "turn_id")


@dataclass
class RetentionJobReport:
    """A purge or erase: its plan, what running it did (None for a dry run), and the
    interrupted jobs it finished first."""

    plan: DeletionPlan
    outcome: DeletionOutcome | None
    resumed: list[DeletionOutcome] = field(default_factory=list)
    pending: list[DeletionPlan] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def dry_run(self) -> bool:
        """True when nothing was written."""
        return self.outcome is None


@dataclass
class ApplyReport:
    """What applying the retention policy changed (or would change, for a dry run)."""

    dry_run: bool
    partitions: int = 0
    changed: dict[str, int] = field(default_factory=dict)
    newly_expired: dict[str, int] = field(default_factory=dict)
    revived: dict[str, int] = field(default_factory=dict)
    timelines_refreshed: int = 0
    indexes_rebuilt: int = 0
    seconds: float = 0.0


def index_rebuilder(store: LakeStore, settings: Settings,
                    on_partition: PartitionProgress | None = None) -> Callable[[set[Partition]],
                                                                             None]:
    """Rebuild the indexes of the given partitions that have one (each with the model it was
    built with) and drop indexes of partitions left without rows."""
    def rebuild(partitions: set[Partition]) -> None:
        default = embedding_identity(settings)
        by_model: dict[str | None, set[Partition]] = {}
        for part in partitions:
            try:
                current = read_current(store.root, *part)
            except IndexUnavailable:
                # An unreadable index is rebuilt from the tables, with the configured model.
                by_model.setdefault(default, set()).add(part)
                continue
            if current is not None:  # partitions never indexed stay so (ingest --no-index)
                by_model.setdefault(current[1].model or default, set()).add(part)
        if not by_model:
            build_indexes(store, model=default, partitions=set())  # drops emptied partitions
        for model, parts in sorted(by_model.items(), key=lambda item: str(item[0])):
            build_indexes(store, model=model, partitions=parts, on_partition=on_partition)
    return rebuild


def _runner(store: LakeStore, settings: Settings, faults: Faults, on_step: StepProgress | None,
            on_partition: PartitionProgress | None) -> DeletionRunner:
    return DeletionRunner(store, settings, rebuild=index_rebuilder(store, settings, on_partition),
                          faults=faults, on_step=on_step)


def purge(settings: Settings, *, as_of: datetime | None = None, tenant: str | None = None,
          dry_run: bool = False, actor: str = "cli", faults: Faults = NO_FAULTS,
          on_step: StepProgress | None = None,
          on_partition: PartitionProgress | None = None) -> RetentionJobReport:
    """Delete everything expired as of ``as_of`` (default now), optionally of one tenant."""
    started = time.perf_counter()
    store = LakeStore(settings.lake)
    now = as_of or datetime.now(UTC)
    runner = _runner(store, settings, faults, on_step, on_partition)
    if dry_run:
        plan = plan_purge(store, settings, as_of=now, actor=actor, tenant=tenant)
        return RetentionJobReport(plan, None, pending=runner.pending(),
                                  seconds=time.perf_counter() - started)
    with writer_lock(store.root, timeout_s=settings.lock_timeout_s,
                     job="turnlake retention purge"):
        BatchCommitter(store, FileStore(store.root)).recover()
        resumed = runner.resume()
        plan = plan_purge(store, settings, as_of=now, actor=actor, tenant=tenant)
        outcome = runner.run(plan)
    return RetentionJobReport(plan, outcome, resumed, seconds=time.perf_counter() - started)


def erase(settings: Settings, target: ErasureTarget, *, actor: str, settle: Settle | None,
          dry_run: bool = False, faults: Faults = NO_FAULTS, on_step: StepProgress | None = None,
          on_partition: PartitionProgress | None = None) -> RetentionJobReport:
    """Delete everything of one user, conversation or turn now, whatever its TTL.

    ``settle`` runs first (not for a dry run): the front end's way of making the recordings
    its servers acknowledged part of the tables (:data:`Settle`); None where nothing records
    into the lake but through its writer lock."""
    started = time.perf_counter()
    store = LakeStore(settings.lake)
    runner = _runner(store, settings, faults, on_step, on_partition)
    if dry_run:
        plan = plan_erase(store, settings, target, actor=actor)
        return RetentionJobReport(plan, None, pending=runner.pending(),
                                  seconds=time.perf_counter() - started)
    if settle is not None:
        settle()
    with writer_lock(store.root, timeout_s=settings.lock_timeout_s, job="turnlake erase"):
        BatchCommitter(store, FileStore(store.root)).recover()
        resumed = runner.resume()
        plan = plan_erase(store, settings, target, actor=actor)
        outcome = runner.run(plan)
    return RetentionJobReport(plan, outcome, resumed, seconds=time.perf_counter() - started)


# -- retention apply --------------------------------------------------------------------------

def apply_policy(settings: Settings, *, dry_run: bool = False, actor: str = "cli",
                 as_of: datetime | None = None,
                 on_partition: PartitionProgress | None = None) -> ApplyReport:
    """Recompute ``expires_at`` of every stored row from the current policy (a record's own
    ttl_days wins), then refresh timelines and indexes that carry expiries.

    Each partition of each table is rewritten in one commit, only when something changed. A
    re-run after a crash finds the rewritten partitions unchanged and still reconciles
    timelines and stale indexes, so it completes the job.
    """
    started = time.perf_counter()
    store = LakeStore(settings.lake)
    report = ApplyReport(dry_run=dry_run)
    now = as_of or datetime.now(UTC)
    if dry_run:
        _apply_all(store, settings, report, now, write=False, on_partition=on_partition)
    else:
        with writer_lock(store.root, timeout_s=settings.lock_timeout_s,
                         job="turnlake retention apply"):
            BatchCommitter(store, FileStore(store.root)).recover()
            _runner(store, settings, NO_FAULTS, None, on_partition).resume()
            changed = _apply_all(store, settings, report, now, write=True,
                                 on_partition=on_partition)
            stale = _stale_timelines(store)
            report.timelines_refreshed = len(stale)
            for chunk in in_chunks(stale):
                refresh_timelines(store, chunk)
            statuses = partition_statuses(store)
            todo = changed | {p for p, s in statuses.items() if s.freshness == "stale"}
            index_rebuilder(store, settings, on_partition)(todo)
            report.indexes_rebuilt = len({p for p in todo if p in statuses
                                          and statuses[p].manifest is not None})
            write_audit(store, AuditEntry(
                at=datetime.now(UTC), action="retention.apply", actor=actor, tenant=None,
                target="policy", counts={"changed": report.changed,
                                         "newly_expired": report.newly_expired}),
                job_id=f"apply-{uuid.uuid4().hex[:12]}")
    report.seconds = time.perf_counter() - started
    return report


def _apply_all(store: LakeStore, settings: Settings, report: ApplyReport, now: datetime, *,
               write: bool, on_partition: PartitionProgress | None) -> set[Partition]:
    partitions = sorted(set(store.partition_fingerprints(Table.TURN_LOGS))
                        | set(store.partition_fingerprints(Table.CONTENT_ROWS)))
    report.partitions = len(partitions)
    changed: set[Partition] = set()
    for i, part in enumerate(partitions, start=1):
        if _apply_partition(store, settings, part, report, now, write=write):
            changed.add(part)
        if on_partition is not None:
            on_partition(f"{part[0]}/{part[1]}", i, len(partitions))
    return changed


def _read(store: LakeStore, table: Table, part: Partition,
          columns: list[str] | None = None) -> pl.DataFrame:
    expr = (ds.field("tenant") == part[0]) & (ds.field("month") == part[1])
    frame = pl.from_arrow(store.read(table, columns=columns, filter=expr))
    assert isinstance(frame, pl.DataFrame)
    return frame


def _apply_partition(store: LakeStore, settings: Settings, part: Partition,
                     report: ApplyReport, now: datetime, *, write: bool) -> bool:
    """Recompute one partition's expiries; returns True when a table was (or would be)
    rewritten."""
    logs = with_record_ttl(_read(store, Table.TURN_LOGS, part, [
        "tenant", "app", *_TURN, "ended_at", "expires_at", "payload"])).drop("payload")
    logs = logs.with_columns(policy_expiry(logs, settings).alias("new_expires_at"))
    turns = logs.select([*_TURN, pl.col("ended_at").alias("_ended_at"),
                         pl.col("record_ttl").alias("_record_ttl"),
                         pl.col("new_expires_at").alias("_turn_expires_at")])
    any_change = False
    for table in (*_ROW_TABLES, Table.TURN_LOGS):
        columns = ["tenant", *_TURN, "expires_at"] + (
            ["app", "role"] if table == Table.CONTENT_ROWS else [])
        frame = _with_new_expiry(_read(store, table, part, columns), table, turns, settings)
        moved = frame.filter(pl.col("new_expires_at") != pl.col("expires_at"))
        if moved.height == 0:
            continue
        any_change = True
        name = table.value
        report.changed[name] = report.changed.get(name, 0) + moved.height
        report.newly_expired[name] = report.newly_expired.get(name, 0) + moved.filter(
            (pl.col("expires_at") > now) & (pl.col("new_expires_at") <= now)).height
        report.revived[name] = report.revived.get(name, 0) + moved.filter(
            (pl.col("expires_at") <= now) & (pl.col("new_expires_at") > now)).height
        if write:
            full = _with_new_expiry(_read(store, table, part), table, turns, settings)
            rewritten = full.with_columns(pl.col("new_expires_at").alias("expires_at")).drop(
                "new_expires_at")
            store.replace_where(table, rewritten.to_arrow(compat_level=pl.CompatLevel.oldest()),
                                f"tenant = '{part[0]}' AND month = '{part[1]}'")
    return any_change


def _with_new_expiry(frame: pl.DataFrame, table: Table, turns: pl.DataFrame,
                     settings: Settings) -> pl.DataFrame:
    """``frame`` with ``new_expires_at``; rows without a TurnLog keep their expiry."""
    joined = frame.with_row_index("_order").join(turns, on=list(_TURN), how="left").sort("_order")
    value = pl.col("_turn_expires_at")
    if table == Table.CONTENT_ROWS:
        known = joined.filter(pl.col("_ended_at").is_not_null()).select(
            "_order", "tenant", "app", "role", pl.col("_ended_at").alias("ended_at"),
            pl.col("_record_ttl").alias("record_ttl"))
        by_role = known.select("_order").with_columns(
            policy_expiry(known, settings, role_column="role").alias("_role_expires_at"))
        joined = joined.join(by_role, on="_order", how="left").sort("_order")
        value = pl.col("_role_expires_at")
    return joined.with_columns(pl.coalesce(value, pl.col("expires_at")).alias("new_expires_at")
                               ).drop([c for c in joined.columns if c.startswith("_")])


def _stale_timelines(store: LakeStore) -> list[tuple[str, str]]:
    """Conversations whose timeline expiry is not the latest of their TurnLogs' expiries."""
    if not store.exists(Table.TURN_LOGS):
        return []
    logs = pl.from_arrow(store.read(Table.TURN_LOGS,
                                    columns=["tenant", "conversation_id", "expires_at"]))
    timelines = pl.from_arrow(store.read(Table.TIMELINES,
                                         columns=["tenant", "conversation_id", "expires_at"]))
    assert isinstance(logs, pl.DataFrame) and isinstance(timelines, pl.DataFrame)
    latest = logs.group_by(["tenant", "conversation_id"]).agg(pl.col("expires_at").max())
    joined = latest.join(timelines, on=["tenant", "conversation_id"], how="left",
                         suffix="_timeline")
    stale = joined.filter(pl.col("expires_at_timeline").is_null()
                          | (pl.col("expires_at_timeline") != pl.col("expires_at")))
    return sorted((str(t), str(c)) for t, c in stale.select(
        ["tenant", "conversation_id"]).iter_rows())
