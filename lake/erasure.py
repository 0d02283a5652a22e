"""Purge (expired data) and erase (a user, conversation or turn): remove the data from every
table, the file store, the quarantine and the indexes, in an order that survives a crash.

A job is first *planned* — read only: what would go, counted; the dry run prints this — then
its plan is written to ``<lake>/_retention/<job_id>.json`` (ids and counts, never text) and
executed step by step, the caller holding the writer lock::

    1. turn_logs     TurnLogs deleted: the turns vanish from catalog and materialization
    2. content_rows  search rows deleted; roles that expired before their turn are cut out of
                     the live TurnLog payloads
    3. indexes       the affected partitions rebuilt (dropped when no row is left)
    4. events        rows deleted
    5. files         file catalog rows deleted
    6. bytes         hosted file bytes deleted from the file store (a packed file's range
                     overwritten with zeros; a pack nothing points into is removed)
    7. quarantine    the job's quarantined lines deleted
    8. timelines     recomputed for the affected conversations (emptied ones disappear)
    9. vacuum        unreferenced data files removed; Delta logs checkpointed and truncated
   10. audit         one audit row (who, what, when, counts)
   11. manifest removed

Each step is an idempotent delete or recompute, so a crashed job is finished by running its
manifest again from step 1 (``DeletionRunner.resume``), which every retention job does first.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from lake.errors import LakeError
from lake.faults import NO_FAULTS, Faults
from lake.filestore import PACKED_PREFIX, FileStore, packs_of
from lake.refs import validate_id
from lake.retention import (
    RETENTION_DIR,
    AuditEntry,
    DeletionPlan,
    ErasureTarget,
    TurnKey,
    in_chunks,
    pending_manifests,
    quarantine_expiry,
    quarantine_matches,
    quarantine_tenant,
    redact_payload,
    turn_key,
    turns_sql,
    write_audit,
)
from lake.settings import Settings
from lake.store import LakeStore, Partition
from lake.tables import TURN_LOGS, Table
from lake.timelines import conversation_filter, refresh_timelines

STEPS = ("turn_logs", "content_rows", "indexes", "events", "files", "bytes", "quarantine",
         "timelines", "vacuum", "audit")
# Tables whose old data files may hold purged values; the audit table never does.
DATA_TABLES = (Table.TURN_LOGS, Table.CONTENT_ROWS, Table.EVENTS, Table.FILES, Table.TIMELINES,
               Table.QUARANTINE)
_KEYS = ("tenant", "conversation_id", "turn_id")

Rebuild = Callable[[set[Partition]], None]
StepProgress = Callable[[str, int, int], None]


@dataclass
class DeletionOutcome:
    """What running a plan did: rows removed per table (by this run), files and log entries
    removed, and seconds per step."""

    plan: DeletionPlan
    deleted: dict[str, int] = field(default_factory=dict)
    vacuumed_files: int = 0
    log_files_removed: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


def _turns_expr(turns: Iterable[TurnKey]) -> ds.Expression | None:
    grouped: dict[tuple[str, str], set[str]] = {}
    for tenant, cid, tid in turns:
        grouped.setdefault((tenant, cid), set()).add(tid)
    expr: ds.Expression | None = None
    for (t, c), tids in sorted(grouped.items()):
        clause = ((ds.field("tenant") == t) & (ds.field("conversation_id") == c)
                  & ds.field("turn_id").isin(sorted(tids)))
        expr = clause if expr is None else expr | clause
    return expr


def _frame(store: LakeStore, table: Table, columns: list[str],
           expr: ds.Expression | None) -> pl.DataFrame:
    frame = pl.from_arrow(store.read(table, columns=columns, filter=expr))
    assert isinstance(frame, pl.DataFrame)
    return frame


def _pairs(frame: pl.DataFrame, first: str, second: str) -> set[tuple[str, str]]:
    return {(str(a), str(b)) for a, b in frame.select([first, second]).unique().iter_rows()}


def _new_plan(kind: str, actor: str, **kw: Any) -> DeletionPlan:
    now = datetime.now(UTC)
    job_id = f"{kind}-{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    return DeletionPlan(job_id=job_id, kind=kind, actor=actor, created_at=now.isoformat(), **kw)


def _doomed_quarantine(store: LakeStore, settings: Settings,
                       plan: DeletionPlan) -> tuple[pa.Table, list[bool]]:
    rows = store.read(Table.QUARANTINE)
    raws = rows.column("raw").to_pylist()
    if plan.target is not None:
        target = plan.target
        return rows, [quarantine_matches(r, target) for r in raws]
    assert plan.as_of is not None
    as_of = datetime.fromisoformat(plan.as_of)
    owner = plan.tenant
    return rows, [quarantine_expiry(r, at, settings) <= as_of
                  and (owner is None or quarantine_tenant(r) == owner)
                  for r, at in zip(raws, rows.column("quarantined_at").to_pylist(), strict=True)]


def plan_purge(store: LakeStore, settings: Settings, *, as_of: datetime, actor: str,
               tenant: str | None = None) -> DeletionPlan:
    """Everything expired as of ``as_of`` (of one tenant, or all): TurnLogs and rows past
    their expires_at, every row of an expired turn, and quarantined lines past their TTL."""
    as_of = as_of.astimezone(UTC)
    if tenant is not None:
        validate_id(tenant, "tenant")
    plan = _new_plan("purge", actor, as_of=as_of.isoformat(), tenant=tenant)
    expired = ds.field("expires_at") <= as_of
    if tenant is not None:
        expired &= ds.field("tenant") == tenant
    logs = _frame(store, Table.TURN_LOGS, ["tenant", "month", *_KEYS[1:]], expired)
    rows = _frame(store, Table.CONTENT_ROWS, ["tenant", "month", *_KEYS[1:], "role"], expired)
    turns = logs.select(list(_KEYS)).unique()
    conversations = conversation_filter(_pairs(logs, "tenant", "conversation_id"))
    extra: set[TurnKey] = set()
    if conversations is not None:
        # A role or file may outlive its turn under a more generous rule; it goes with the turn.
        for table in (Table.CONTENT_ROWS, Table.EVENTS, Table.FILES):
            alive = _frame(store, table, list(_KEYS), ~expired & conversations)
            outliving = alive.join(turns, on=list(_KEYS), how="semi")
            extra |= {turn_key(k) for k in outliving.iter_rows()}
    plan.extra_turns = sorted(extra)
    extra_expr = _turns_expr(extra)
    doomed = expired if extra_expr is None else expired | extra_expr
    files = _frame(store, Table.FILES, [*_KEYS, "storage_key"], doomed)
    live_partial = rows.join(turns, on=list(_KEYS), how="anti")
    plan.redactions = _redactions(store, live_partial, expired)
    plan.storage_keys = sorted(set(files["storage_key"].to_list()))
    plan.turn_dirs = sorted(turn_key(k) for k in turns.iter_rows())
    plan.conversations = sorted(_pairs(logs, "tenant", "conversation_id"))
    plan.partitions = sorted(_pairs(logs, "tenant", "month")
                             | _pairs(rows, "tenant", "month"))
    plan.counts = {
        "turn_logs": logs.height,
        "content_rows": _count(store, Table.CONTENT_ROWS, doomed),
        "events": _count(store, Table.EVENTS, doomed),
        "files": files.height,
        "file_objects": len(plan.storage_keys),
        "payloads_redacted": len(plan.redactions),
        "quarantine": sum(_doomed_quarantine(store, settings, plan)[1]),
    }
    return plan


def _redactions(store: LakeStore, partial: pl.DataFrame,
                expired: ds.Expression) -> list[tuple[str, str, str, str, list[str]]]:
    """Live turns some of whose roles expired: those roles' texts leave the payload."""
    if partial.height == 0:
        return []
    convs = conversation_filter(_pairs(partial, "tenant", "conversation_id"))
    assert convs is not None
    live = _frame(store, Table.TURN_LOGS, list(_KEYS), ~expired & convs)
    grouped = (partial.join(live, on=list(_KEYS), how="semi")
               .group_by(["tenant", "month", *_KEYS[1:]])
               .agg(pl.col("role").unique().sort()))
    return sorted((t, m, c, tid, list(roles)) for t, m, c, tid, roles in grouped.iter_rows())


def plan_erase(store: LakeStore, settings: Settings, target: ErasureTarget, *,
               actor: str) -> DeletionPlan:
    """Everything of one user, conversation or turn, whatever its TTL."""
    plan = _new_plan("erase", actor, target=target)
    expr = target.expression()
    logs = _frame(store, Table.TURN_LOGS, ["tenant", "month", *_KEYS[1:]], expr)
    rows = _frame(store, Table.CONTENT_ROWS, ["tenant", "month", *_KEYS[1:]], expr)
    files = _frame(store, Table.FILES, [*_KEYS, "storage_key"], expr)
    timeline_expr = (ds.field("tenant") == target.tenant) & (
        ds.field("user_id") == target.user_id if target.user_id is not None
        else ds.field("conversation_id") == target.conversation_id)
    timelines = _frame(store, Table.TIMELINES, ["tenant", "conversation_id"], timeline_expr)
    plan.storage_keys = sorted(set(files["storage_key"].to_list()))
    dirs = {turn_key(k) for frame in (logs, rows, files)
            for k in frame.select(list(_KEYS)).iter_rows()}
    if target.turn_id is not None:
        dirs.add((target.tenant, str(target.conversation_id), target.turn_id))
    plan.turn_dirs = sorted(dirs)
    if target.kind == "conversation":
        plan.conversation_dirs = [(target.tenant, str(target.conversation_id))]
    plan.conversations = sorted(
        {(t, c) for t, c, _ in dirs} | _pairs(timelines, "tenant", "conversation_id")
        | set(plan.conversation_dirs))
    plan.partitions = sorted(_pairs(logs, "tenant", "month")
                             | _pairs(rows, "tenant", "month"))
    plan.counts = {
        "turn_logs": logs.height, "content_rows": rows.height,
        "events": _count(store, Table.EVENTS, expr), "files": files.height,
        "file_objects": len(plan.storage_keys),
        "quarantine": sum(_doomed_quarantine(store, settings, plan)[1]),
    }
    return plan


def _referenced_packs(store: LakeStore, packs: set[str]) -> set[str]:
    """Those of ``packs`` that some row of the files catalog still points into."""
    if not packs or not store.exists(Table.FILES):
        return set()
    keys = store.read(Table.FILES, columns=["storage_key"],
                      filter=pc.starts_with(ds.field("storage_key"), PACKED_PREFIX))
    return packs & packs_of(keys["storage_key"].to_pylist())


def _count(store: LakeStore, table: Table, expr: ds.Expression) -> int:
    return int(store.read(table, columns=["tenant"], filter=expr).num_rows)


class DeletionRunner:
    """Executes deletion plans through their manifests; the caller holds the writer lock.

    ``rebuild(partitions)`` brings those partitions' indexes up to date (the pipeline's index
    build); ``on_step(name, done, total)`` reports progress.
    """

    def __init__(self, store: LakeStore, settings: Settings, *, rebuild: Rebuild,
                 faults: Faults = NO_FAULTS, on_step: StepProgress | None = None) -> None:
        self._store = store
        self._settings = settings
        self._files = FileStore(store.root)
        self._rebuild = rebuild
        self._faults = faults
        self._on_step = on_step
        self._blobs = store.root.blobs

    def pending(self) -> list[DeletionPlan]:
        """Plans of jobs that were interrupted, oldest first."""
        plans = []
        for key in pending_manifests(self._store):
            try:
                plans.append(DeletionPlan.from_json(self._blobs.read_bytes(key).decode()))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise LakeError(f"unreadable retention manifest "
                                f"{self._store.root.child_uri(key)}: {exc}; it lists what an "
                                "interrupted job still has to delete, inspect it") from exc
        return sorted(plans, key=lambda p: p.created_at)

    def resume(self) -> list[DeletionOutcome]:
        """Finish every interrupted job."""
        return [self.run(plan) for plan in self.pending()]

    def run(self, plan: DeletionPlan) -> DeletionOutcome:
        """Write the plan's manifest (unless already there) and execute every step."""
        key = f"{RETENTION_DIR}/{plan.job_id}.json"
        if not self._blobs.exists(key):
            self._blobs.write_bytes(key, plan.to_json().encode(), durable=True)
        self._faults.hit(f"{plan.kind}.after_manifest")
        outcome = DeletionOutcome(plan)
        for i, step in enumerate(STEPS, start=1):
            started = time.perf_counter()
            getattr(self, f"_step_{step}")(plan, outcome)
            outcome.seconds[step] = time.perf_counter() - started
            if self._on_step is not None:
                self._on_step(step, i, len(STEPS))
            self._faults.hit(f"{plan.kind}.after_{step}")
        self._blobs.delete(key)
        return outcome

    # -- steps ------------------------------------------------------------------------------

    def _delete(self, table: Table, plan: DeletionPlan, outcome: DeletionOutcome) -> None:
        outcome.deleted[table.value] = sum(self._store.delete(table, predicate)
                                           for predicate in plan.predicates(table))

    def _step_turn_logs(self, plan: DeletionPlan, outcome: DeletionOutcome) -> None:
        self._delete(Table.TURN_LOGS, plan, outcome)

    def _step_content_rows(self, plan: DeletionPlan, outcome: DeletionOutcome) -> None:
        self._delete(Table.CONTENT_ROWS, plan, outcome)
        by_partition: dict[Partition, dict[tuple[str, str], list[str]]] = {}
        for tenant, month, cid, tid, roles in plan.redactions:
            by_partition.setdefault((tenant, month), {})[(cid, tid)] = roles
        redacted = 0
        for (tenant, month), turns in sorted(by_partition.items()):
            keys = sorted(turns)
            for chunk in in_chunks(keys):
                redacted += self._redact(tenant, month, {k: turns[k] for k in chunk})
        outcome.deleted["payloads_redacted"] = redacted

    def _redact(self, tenant: str, month: str, turns: dict[tuple[str, str], list[str]]) -> int:
        expr = ((ds.field("tenant") == tenant) & (ds.field("month") == month)
                & ds.field("conversation_id").isin(sorted({c for c, _ in turns})))
        logs = self._store.read(Table.TURN_LOGS, filter=expr).to_pylist()
        changed = []
        for row in logs:
            roles = turns.get((row["conversation_id"], row["turn_id"]))
            if roles is None:
                continue
            payload = redact_payload(row["payload"], set(roles))
            if payload != row["payload"]:
                changed.append({**row, "payload": payload})
        if changed:
            keys = [(tenant, r["conversation_id"], r["turn_id"]) for r in changed]
            self._store.replace_where(
                Table.TURN_LOGS, pa.Table.from_pylist(changed, schema=TURN_LOGS),
                f"month = '{month}' AND {turns_sql(keys)}")
        return len(changed)

    def _step_indexes(self, plan: DeletionPlan, outcome: DeletionOutcome) -> None:
        if plan.partitions:
            self._rebuild(set(plan.partitions))

    def _step_events(self, plan: DeletionPlan, outcome: DeletionOutcome) -> None:
        self._delete(Table.EVENTS, plan, outcome)

    def _step_files(self, plan: DeletionPlan, outcome: DeletionOutcome) -> None:
        self._delete(Table.FILES, plan, outcome)

    def _step_bytes(self, plan: DeletionPlan, outcome: DeletionOutcome) -> None:
        # After the files step: a pack no catalog row points into any more goes whole.
        packs = packs_of(plan.storage_keys)
        unreferenced = packs - _referenced_packs(self._store, packs)
        removed = self._files.erase(plan.storage_keys, unreferenced_packs=unreferenced)
        for tenant, cid, tid in plan.turn_dirs:
            removed += self._files.delete_prefix(tenant, cid, tid)
        for tenant, cid in plan.conversation_dirs:
            removed += self._files.delete_prefix(tenant, cid)
        # Empty folders are named by ids only, but an erased conversation should not linger.
        for tenant, cid in sorted({(t, c) for t, c, _ in plan.turn_dirs}
                                  | set(plan.conversation_dirs)):
            self._files.remove_empty_folders(tenant, cid)
        outcome.deleted["file_objects"] = removed

    def _step_quarantine(self, plan: DeletionPlan, outcome: DeletionOutcome) -> None:
        if not self._store.exists(Table.QUARANTINE):
            outcome.deleted["quarantine"] = 0
            return
        rows, doomed = _doomed_quarantine(self._store, self._settings, plan)
        if any(doomed):
            keep = rows.filter(pa.array([not d for d in doomed]))
            # Quarantine rows have no key; rewriting the table is the only exact delete.
            self._store.replace_where(Table.QUARANTINE, keep, "true")
        outcome.deleted["quarantine"] = sum(doomed)

    def _step_timelines(self, plan: DeletionPlan, outcome: DeletionOutcome) -> None:
        as_of = datetime.fromisoformat(plan.as_of) if plan.as_of else None
        for chunk in in_chunks(plan.conversations):
            refresh_timelines(self._store, chunk, as_of=as_of)

    def _step_vacuum(self, plan: DeletionPlan, outcome: DeletionOutcome) -> None:
        for table in DATA_TABLES:
            if self._store.exists(table):
                outcome.vacuumed_files += len(self._store.vacuum(table, full=True))
                outcome.log_files_removed += self._store.truncate_log(table)

    def _step_audit(self, plan: DeletionPlan, outcome: DeletionOutcome) -> None:
        write_audit(self._store, AuditEntry(
            at=datetime.now(UTC), action=plan.kind, actor=plan.actor,
            tenant=plan.target.tenant if plan.target else None, target=plan.describe(),
            counts=plan.counts), job_id=plan.job_id)

