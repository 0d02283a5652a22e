"""Planning a purge (expired data) or an erasure (a user, conversation or turn): read only,
what would go, counted — the dry run prints it — and the manifest a run executes
(:mod:`lake.deletion.runner`) and a crashed run is finished from.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from lake.deletion.policy import quarantine_expiry, quarantine_matches, quarantine_tenant
from lake.deletion.target import ErasureTarget, TurnKey
from lake.filestore import PACKED_PREFIX, packs_of
from lake.refs import validate_id
from lake.settings import Settings
from lake.store import LakeStore, Partition
from lake.tables import Table
from lake.timelines import conversation_filter

_KEYS = ("tenant", "conversation_id", "turn_id")
RETENTION_DIR = "_retention"  # manifests of purge / erase jobs still running, under the root


def pending_manifests(store: LakeStore) -> list[str]:
    """Lake keys of the manifests of purge or erase jobs that have not finished."""
    return [f"{RETENTION_DIR}/{name}" for name in store.root.blobs.children(RETENTION_DIR)
            if name.endswith(".json")]


CHUNK = 1000
T = TypeVar("T")


def in_chunks(items: Sequence[T]) -> list[Sequence[T]]:
    """Slices of at most CHUNK items, one commit each: DataFusion overflows its stack on SQL
    predicates with tens of thousands of ids."""
    return [items[i:i + CHUNK] for i in range(0, len(items), CHUNK)]


def turn_key(value: Iterable[Any]) -> TurnKey:
    """A (tenant, conversation_id, turn_id) key from any three-item iterable (e.g. JSON)."""
    t, c, tid = (str(v) for v in value)
    return t, c, tid


def turns_sql(turns: Iterable[TurnKey]) -> str:
    """A SQL predicate selecting the given turns (ids are validated: no quotes)."""
    grouped: dict[tuple[str, str], set[str]] = {}
    for tenant, cid, tid in turns:
        grouped.setdefault((tenant, cid), set()).add(tid)
    return "(" + " OR ".join(
        f"(tenant = '{t}' AND conversation_id = '{c}' AND turn_id IN "
        f"({', '.join(repr(x) for x in sorted(tids))}))"
        for (t, c), tids in sorted(grouped.items())) + ")"


@dataclass
class DeletionPlan:
    """What one purge or erase removes: predicates derive from ``as_of`` / ``target``; the
    listed ids are what cannot be recomputed once deletion has begun."""

    job_id: str
    kind: str  # "purge" or "erase"
    actor: str
    created_at: str
    as_of: str | None = None
    tenant: str | None = None  # purge only: restrict to one tenant
    target: ErasureTarget | None = None
    extra_turns: list[TurnKey] = field(default_factory=list)
    redactions: list[tuple[str, str, str, str, list[str]]] = field(default_factory=list)
    storage_keys: list[str] = field(default_factory=list)
    turn_dirs: list[TurnKey] = field(default_factory=list)
    conversation_dirs: list[tuple[str, str]] = field(default_factory=list)
    conversations: list[tuple[str, str]] = field(default_factory=list)
    partitions: list[Partition] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        """True when the job would remove nothing."""
        return not any(self.counts.values())

    def describe(self) -> str:
        """The audit row's ``target``."""
        if self.target is not None:
            return self.target.describe()
        scope = f"tenant {self.tenant}" if self.tenant else "all tenants"
        return f"expired as of {self.as_of} ({scope})"

    def predicates(self, table: Table) -> list[str]:
        """SQL predicates selecting the rows this job deletes from a table, one per commit."""
        if self.target is not None:
            return [self.target.sql()]
        clause = f"expires_at <= '{self.as_of}'"
        if self.tenant is not None:
            clause = f"tenant = '{self.tenant}' AND {clause}"
        if table == Table.TURN_LOGS:
            return [clause]
        return [clause] + [turns_sql(chunk) for chunk in in_chunks(self.extra_turns)]

    def to_json(self) -> str:
        """The manifest body."""
        body = asdict(self)
        body["target"] = self.target.to_json() if self.target else None
        return json.dumps(body, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DeletionPlan:
        """Parse a manifest written by :meth:`to_json`."""
        body: dict[str, Any] = json.loads(text)
        target = body.pop("target")
        plan = cls(**body, target=ErasureTarget.from_json(target) if target else None)
        plan.extra_turns = [turn_key(k) for k in plan.extra_turns]
        plan.turn_dirs = [turn_key(k) for k in plan.turn_dirs]
        plan.redactions = [(str(a), str(b), str(c), str(d), list(r))
                           for a, b, c, d, r in plan.redactions]
        plan.conversation_dirs = [(str(t), str(c)) for t, c in plan.conversation_dirs]
        plan.conversations = [(str(t), str(c)) for t, c in plan.conversations]
        plan.partitions = [(str(t), str(m)) for t, m in plan.partitions]
        return plan


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


def doomed_quarantine(store: LakeStore, settings: Settings,
                      plan: DeletionPlan) -> tuple[pa.Table, list[bool]]:
    """The quarantine table, and for each of its lines whether ``plan`` removes it."""
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
        "quarantine": sum(doomed_quarantine(store, settings, plan)[1]),
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
        "quarantine": sum(doomed_quarantine(store, settings, plan)[1]),
    }
    return plan


def referenced_packs(store: LakeStore, packs: set[str]) -> set[str]:
    """Those of ``packs`` that a stored file row still points into."""
    """Those of ``packs`` that some row of the files catalog still points into."""
    if not packs or not store.exists(Table.FILES):
        return set()
    keys = store.read(Table.FILES, columns=["storage_key"],
                      filter=pc.starts_with(ds.field("storage_key"), PACKED_PREFIX))
    return packs & packs_of(keys["storage_key"].to_pylist())


def _count(store: LakeStore, table: Table, expr: ds.Expression) -> int:
    return int(store.read(table, columns=["tenant"], filter=expr).num_rows)
