"""The retention policy applied to stored data: who an erasure targets, what a purge or erase
plans to delete, what a row's expiry is under the current policy, what of a TurnLog payload an
expired role takes with it, when a quarantined line goes, and the audit trail of retention jobs.

Expiry follows the writers (lake/projection.py): ``ended_at + days``, where ``days`` is the
record's own ``ttl_days`` when it set one, else the policy's TTL for (tenant, app, role);
TurnLogs, events and file rows use the turn's TTL (no role), content rows their role's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds

from lake.errors import QueryError
from lake.refs import validate_id
from lake.settings import Settings
from lake.store import LakeStore, Partition
from lake.tables import AUDIT, Table

RETENTION_DIR = "_retention"  # manifests of purge / erase jobs still running, under the root


def pending_manifests(store: LakeStore) -> list[str]:
    """Lake keys of the manifests of purge or erase jobs that have not finished."""
    return [f"{RETENTION_DIR}/{name}" for name in store.root.blobs.children(RETENTION_DIR)
            if name.endswith(".json")]


TurnKey = tuple[str, str, str]  # (tenant, conversation_id, turn_id)


@dataclass(frozen=True)
class ErasureTarget:
    """What an erase removes: one user, one conversation, or one turn, within a tenant."""

    tenant: str
    user_id: str | None = None
    conversation_id: str | None = None
    turn_id: str | None = None

    def __post_init__(self) -> None:
        validate_id(self.tenant, "tenant")
        for value, what in ((self.user_id, "user_id"), (self.conversation_id, "conversation_id"),
                            (self.turn_id, "turn_id")):
            if value is not None:
                validate_id(value, what)
        if self.turn_id is not None and self.conversation_id is None:
            raise QueryError("an erased turn needs its conversation (--turn C/T)")
        if (self.user_id is None) == (self.conversation_id is None):
            raise QueryError("erase exactly one of --user U, --conversation C or --turn C/T")

    @classmethod
    def parse(cls, tenant: str, *, user: str | None = None, conversation: str | None = None,
              turn: str | None = None) -> ErasureTarget:
        """Build a target from the CLI's options (``turn`` is ``C/T``)."""
        given = [name for name, v in (("--user", user), ("--conversation", conversation),
                                      ("--turn", turn)) if v is not None]
        if len(given) != 1:
            raise QueryError("erase exactly one of --user U, --conversation C or --turn C/T "
                             f"(got {', '.join(given) or 'none'})")
        if turn is not None:
            cid, sep, tid = turn.partition("/")
            if not sep or not cid or not tid:
                raise QueryError(f"--turn must be CONVERSATION/TURN, not {turn!r}")
            return cls(tenant, conversation_id=cid, turn_id=tid)
        return cls(tenant, user_id=user, conversation_id=conversation)

    @property
    def kind(self) -> str:
        """``user``, ``conversation`` or ``turn``."""
        if self.user_id is not None:
            return "user"
        return "turn" if self.turn_id is not None else "conversation"

    def describe(self) -> str:
        """``user u-ana``, ``conversation c-42`` or ``turn c-42/t-0001`` (for audit rows)."""
        if self.user_id is not None:
            return f"user {self.user_id}"
        if self.turn_id is not None:
            return f"turn {self.conversation_id}/{self.turn_id}"
        return f"conversation {self.conversation_id}"

    def sql(self) -> str:
        """The SQL predicate selecting the target's rows (ids are validated: no quotes)."""
        clauses = [f"tenant = '{self.tenant}'"]
        if self.user_id is not None:
            clauses.append(f"user_id = '{self.user_id}'")
        if self.conversation_id is not None:
            clauses.append(f"conversation_id = '{self.conversation_id}'")
        if self.turn_id is not None:
            clauses.append(f"turn_id = '{self.turn_id}'")
        return " AND ".join(clauses)

    def expression(self) -> ds.Expression:
        """The same selection as a dataset filter."""
        expr = ds.field("tenant") == self.tenant
        if self.user_id is not None:
            expr &= ds.field("user_id") == self.user_id
        if self.conversation_id is not None:
            expr &= ds.field("conversation_id") == self.conversation_id
        if self.turn_id is not None:
            expr &= ds.field("turn_id") == self.turn_id
        return expr

    def matches(self, tenant: object, user_id: object, conversation_id: object,
                turn_id: object) -> bool:
        """Whether a row with these ids belongs to the target."""
        return (tenant == self.tenant
                and (self.user_id is None or user_id == self.user_id)
                and (self.conversation_id is None or conversation_id == self.conversation_id)
                and (self.turn_id is None or turn_id == self.turn_id))

    def to_json(self) -> dict[str, str | None]:
        """JSON-ready fields (for job manifests)."""
        return {"tenant": self.tenant, "user_id": self.user_id,
                "conversation_id": self.conversation_id, "turn_id": self.turn_id}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ErasureTarget:
        """Inverse of :meth:`to_json`."""
        return cls(str(data["tenant"]), user_id=data.get("user_id"),
                   conversation_id=data.get("conversation_id"), turn_id=data.get("turn_id"))


# -- deletion plans ------------------------------------------------------------------------

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


# -- expiry under the current policy --------------------------------------------------------

def with_record_ttl(logs: pl.DataFrame) -> pl.DataFrame:
    """Add ``record_ttl`` (the record's own ttl_days, or null) read from the TurnLog payload."""
    return logs.with_columns(
        pl.col("payload").str.json_path_match("$.ttl_days").cast(pl.Int64, strict=False)
        .alias("record_ttl"))


def policy_expiry(frame: pl.DataFrame, settings: Settings, *,
                  role_column: str | None = None) -> pl.Series:
    """``new_expires_at`` for rows with ``tenant``, ``app``, ``ended_at`` and ``record_ttl``
    (and the role in ``role_column`` for content rows): the record's TTL wins, else the
    policy's most specific rule."""
    keys = ["tenant", "app"] + ([role_column] if role_column else [])
    combos = frame.select(keys).unique()
    days = [settings.ttl_days_for(row[0], row[1], row[2] if role_column else None)
            for row in combos.iter_rows()]
    policy = combos.with_columns(pl.Series("_policy_days", days, dtype=pl.Int64))
    joined = frame.select([*keys, "ended_at", "record_ttl"]).with_row_index("_i").join(
        policy, on=keys, how="left", nulls_equal=True).sort("_i")
    chosen = pl.when(pl.col("record_ttl") > 0).then(pl.col("record_ttl")) \
        .otherwise(pl.col("_policy_days"))
    return joined.select(
        (pl.col("ended_at") + pl.duration(days=chosen)).alias("new_expires_at"))[
        "new_expires_at"]


# -- what an expired role takes out of the TurnLog payload ----------------------------------

def redact_payload(payload: str, roles: set[str]) -> str:
    """The TurnLog payload without the texts of the given content-row roles.

    A role whose rows expired before their turn must not live on in the turn's reload source.
    Message texts become empty strings so the payload keeps its shape for readers.
    """
    record = json.loads(payload)
    if "user" in roles:
        for submission in record.get("submissions", []):
            submission["text"] = ""
    if "assistant" in roles and isinstance(record.get("completion"), dict):
        record["completion"]["text"] = ""
    if "summary" in roles and record.get("summary") is not None:
        record["summary"] = None
    if "anchor" in roles and record.get("anchors"):
        record["anchors"] = []
    if "note" in roles and record.get("notes"):
        record["notes"] = []
    if "attachment" in roles:
        for attachment in record.get("attachments", []):
            attachment.pop("text", None)
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


# -- quarantined lines ------------------------------------------------------------------------

def _raw_field(raw: str, parsed: dict[str, Any] | None, name: str) -> str | None:
    if parsed is not None:
        value = parsed.get(name)
        return value if isinstance(value, str) else None
    # A refused line is often not valid JSON (truncated, bad escape); its ids may still be
    # readable, and an erasure must not miss a line because its tail was broken.
    match = re.search(rf'"{name}"\s*:\s*"([A-Za-z0-9_-]{{1,128}})"', raw)
    return match.group(1) if match else None


def _parse_raw(raw: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else {}


def quarantine_matches(raw: str | None, target: ErasureTarget) -> bool:
    """Whether a quarantined line belongs to an erasure target.

    The rule: the line's ``tenant`` equals the target's and so do its ``user_id`` /
    ``conversation_id`` / ``turn_id`` as far as the target names them. Ids are read from the
    parsed JSON object, or (for a line that is not valid JSON) from ``"field": "id"`` pairs in
    its text. A line naming no tenant cannot be attributed and is kept.
    """
    if not raw:
        return False
    parsed = _parse_raw(raw)
    ids = [_raw_field(raw, parsed, name)
           for name in ("tenant", "user_id", "conversation_id", "turn_id")]
    return ids[0] is not None and target.matches(*ids)


def quarantine_tenant(raw: str | None) -> str | None:
    """The tenant a quarantined line names, if any."""
    return _raw_field(raw, _parse_raw(raw), "tenant") if raw else None


def quarantine_expiry(raw: str | None, quarantined_at: datetime, settings: Settings) -> datetime:
    """When a quarantined line expires: ``quarantined_at`` plus the TTL its record would have
    had (its own ``ttl_days``, else the policy for its tenant and app), or the default TTL when
    the line names no tenant."""
    parsed = _parse_raw(raw) if raw else None
    ttl = parsed.get("ttl_days") if parsed else None
    if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0:
        days = ttl
    else:
        tenant = _raw_field(raw or "", parsed, "tenant")
        app = _raw_field(raw or "", parsed, "app") or ""
        days = settings.ttl_days_for(tenant, app) if tenant else settings.default_ttl_days
    return quarantined_at + timedelta(days=days)


# -- audit ------------------------------------------------------------------------------------

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
