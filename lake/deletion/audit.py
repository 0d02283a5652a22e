"""The audit trail of retention jobs: one row per job, ids and counts, never content."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from lake.store import LakeStore
from lake.tables import AUDIT, Table


@dataclass(frozen=True)
class AuditEntry:
    """One audit row: who ran which retention job on what, when, and how much it removed."""

    at: datetime
    action: str
    actor: str
    tenant: str | None
    target: str
    counts: dict[str, Any]


def write_audit(store: LakeStore, entry: AuditEntry, *, job_id: str) -> bool:
    """Append an audit row once per job (a re-run of a crashed job does not repeat it).

    Rows hold ids and counts only, never erased content. Returns True when a row was written.
    """
    if store.exists(Table.AUDIT):
        known = store.read(Table.AUDIT, columns=["counts"])["counts"].to_pylist()
        if any(json.loads(c or "{}").get("job") == job_id for c in known):
            return False
    counts = json.dumps({"job": job_id, **entry.counts}, sort_keys=True)
    store.append(Table.AUDIT, pa.Table.from_pylist([{
        "at": entry.at, "action": entry.action, "actor": entry.actor, "tenant": entry.tenant,
        "target": entry.target, "counts": counts}], schema=AUDIT))
    return True


def read_audit(store: LakeStore, *, limit: int | None = None) -> list[AuditEntry]:
    """Audit rows, newest first."""
    rows = store.read(Table.AUDIT).sort_by([("at", "descending")]).to_pylist()
    entries = [AuditEntry(at=r["at"].astimezone(UTC), action=r["action"], actor=r["actor"],
                          tenant=r["tenant"], target=r["target"],
                          counts=json.loads(r["counts"] or "{}")) for r in rows]
    return entries[:limit] if limit is not None else entries
