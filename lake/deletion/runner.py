"""Running a purge (expired data) or an erasure (a user, conversation or turn): remove the
data from every table, the file store, the quarantine and the indexes, in an order that
survives a crash.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.dataset as ds

from lake.deletion.audit import AuditEntry, write_audit
from lake.deletion.plan import (
    RETENTION_DIR,
    DeletionPlan,
    doomed_quarantine,
    in_chunks,
    pending_manifests,
    referenced_packs,
    turns_sql,
)
from lake.deletion.policy import redact_payload
from lake.errors import LakeError
from lake.faults import NO_FAULTS, Faults
from lake.filestore import FileStore, packs_of
from lake.settings import Settings
from lake.store import LakeStore, Partition
from lake.tables import TURN_LOGS, Table
from lake.timelines import refresh_timelines

STEPS = ("turn_logs", "content_rows", "indexes", "events", "files", "bytes", "quarantine",
         "timelines", "vacuum", "audit")
# Tables whose old data files may hold purged values; the audit table never does.
DATA_TABLES = (Table.TURN_LOGS, Table.CONTENT_ROWS, Table.EVENTS, Table.FILES, Table.TIMELINES,
               Table.QUARANTINE)

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
        unreferenced = packs - referenced_packs(self._store, packs)
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
        rows, doomed = doomed_quarantine(self._store, self._settings, plan)
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

