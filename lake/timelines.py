"""conv.timeline.v1: one row per conversation, derived from its live TurnLogs.

The timeline is recomputed from ``turn_logs`` (never incremented), so refreshing it is idempotent:
a crash between the TurnLog commit and the timeline commit is repaired by refreshing again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds

from lake.store import LakeStore
from lake.tables import TIMELINES, Table

TIMELINE_SCHEMA_ID = "conv.timeline.v1"
_TIMELINE_SOURCE_COLUMNS = ["tenant", "conversation_id", "turn_id", "app", "agent", "user_id",
                            "title", "started_at", "ended_at", "blocks", "expires_at"]


def conversation_filter(conversations: Iterable[tuple[str, str]]) -> ds.Expression | None:
    """A dataset filter selecting the given (tenant, conversation_id) pairs."""
    by_tenant: dict[str, set[str]] = {}
    for tenant, cid in conversations:
        by_tenant.setdefault(tenant, set()).add(cid)
    expr: ds.Expression | None = None
    for tenant, cids in sorted(by_tenant.items()):
        clause = (ds.field("tenant") == tenant) & ds.field("conversation_id").isin(sorted(cids))
        expr = clause if expr is None else expr | clause
    return expr


def refresh_timelines(store: LakeStore, conversations: Iterable[tuple[str, str]],
                      *, as_of: datetime | None = None) -> int:
    """Recompute the timelines of some conversations from their live TurnLogs.

    A conversation whose TurnLogs are all gone (or expired as of ``as_of``) loses its timeline
    row. Returns the number of timeline rows written.
    """
    wanted = sorted(set(conversations))
    if not wanted:
        return 0
    expr = conversation_filter(wanted)
    logs = pl.from_arrow(store.read(Table.TURN_LOGS, columns=_TIMELINE_SOURCE_COLUMNS, filter=expr))
    assert isinstance(logs, pl.DataFrame)
    if as_of is not None:
        logs = logs.filter(pl.col("expires_at") > as_of)
    rows = _timeline_rows(logs)
    live = set(zip(rows["tenant"].to_pylist(), rows["conversation_id"].to_pylist(),
                   strict=True))
    gone = [pair for pair in wanted if pair not in live]
    if gone:
        store.delete(Table.TIMELINES, sql_conversations(gone))
    if rows.num_rows:
        store.replace_where(Table.TIMELINES, rows, sql_conversations(sorted(live)))
    return int(rows.num_rows)


def sql_conversations(conversations: Iterable[tuple[str, str]]) -> str:
    """A SQL predicate selecting (tenant, conversation_id) pairs; ids are validated, so
    they hold no quotes."""
    by_tenant: dict[str, list[str]] = {}
    for tenant, cid in conversations:
        by_tenant.setdefault(tenant, []).append(cid)
    return " OR ".join(
        f"(tenant = '{t}' AND conversation_id IN ({', '.join(repr(c) for c in sorted(cids))}))"
        for t, cids in sorted(by_tenant.items()))


def _timeline_rows(logs: pl.DataFrame) -> pa.Table:
    now = datetime.now(UTC)
    columns: dict[str, list[object]] = {name: [] for name in TIMELINES.names}
    if logs.height == 0:
        return pa.Table.from_pydict(columns, schema=TIMELINES)
    ordered = logs.sort(["tenant", "conversation_id", "started_at", "turn_id"])
    for (tenant, cid), group in ordered.group_by(["tenant", "conversation_id"],
                                                 maintain_order=True):
        first, last = group.row(0, named=True), group.row(group.height - 1, named=True)
        titles = [t for t in group["title"].to_list() if t]
        blocks: list[object] = []
        for raw in group["blocks"].to_list():
            if raw and raw != "[]":
                blocks.extend(json.loads(raw))
        for name, value in (
            ("tenant", tenant), ("conversation_id", cid), ("schema", TIMELINE_SCHEMA_ID),
            ("app", first["app"]), ("agent", first["agent"]), ("user_id", first["user_id"]),
            ("title", titles[-1] if titles else None), ("started_at", first["started_at"]),
            ("last_activity_at", group["ended_at"].max()), ("last_turn_id", last["turn_id"]),
            ("turn_count", group.height),
            ("blocks", json.dumps(blocks, separators=(",", ":"))),
            ("expires_at", group["expires_at"].max()), ("updated_at", now),
        ):
            columns[name].append(value)
    return pa.Table.from_pydict(columns, schema=TIMELINES)
