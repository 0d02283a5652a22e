"""conv.timeline.v1: one row per conversation, derived from its live TurnLogs.

The timeline is recomputed from ``turn_logs`` (never incremented), so refreshing it is idempotent:
a crash between the TurnLog commit and the timeline commit is repaired by refreshing again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from lake.store import LakeStore
from lake.tables import TIMELINES, Table

TIMELINE_SCHEMA_ID = "conv.timeline.v1"
TIMELINE_SOURCE_COLUMNS = ["tenant", "conversation_id", "turn_id", "app", "agent", "user_id",
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
                      *, as_of: datetime | None = None,
                      complete: pa.Table | None = None) -> int:
    """Recompute the timelines of some conversations from their live TurnLogs.

    A conversation whose TurnLogs are all gone (or expired as of ``as_of``) loses its timeline
    row. Returns the number of timeline rows written.

    ``complete`` holds TurnLogs (at least the timeline's source columns) of conversations
    whose every TurnLog it holds, for example those an ingest batch just started: they are
    taken from there rather than read back from the table, a scan that grows with the table.
    """
    return compute_timelines(store, conversations, as_of=as_of, complete=complete).write(store)


@dataclass(frozen=True)
class TimelineUpdate:
    """Recomputed timeline rows of some conversations, to be written (see compute_timelines)."""

    rows: pa.Table
    live: frozenset[tuple[str, str]]  # the conversations of the rows
    gone: tuple[tuple[str, str], ...]  # conversations left without a live TurnLog
    # Those of the conversations that have a timeline row, when the caller has read them
    # already (None: looked up on writing).
    present: frozenset[tuple[str, str]] | None = None

    def write(self, store: LakeStore) -> int:
        """Replace the conversations' timeline rows; returns the number of rows written."""
        if self.gone:
            store.delete(Table.TIMELINES, sql_conversations(self.gone))
        if self.rows.num_rows:
            # A new set: the update is shared with its caller and stays as it was given.
            present = (self.present if self.present is not None
                       else _pairs(stored_timelines(store, self.live,
                                                    columns=["tenant", "conversation_id"]))
                       ) & self.live
            _write_rows(store, self.rows, self.live, present)
        return int(self.rows.num_rows)


def compute_timelines(store: LakeStore, conversations: Iterable[tuple[str, str]],
                      *, as_of: datetime | None = None, complete: pa.Table | None = None,
                      pending: pa.Table | None = None) -> TimelineUpdate:
    """The timelines of some conversations, as refresh_timelines would write them, without
    writing them.

    ``pending`` holds TurnLogs about to be committed: they are counted as stored. This lets an
    ingest batch compute its timelines while its other rows are written, and write them once
    its TurnLogs are committed (the writer lock keeps the table as it was in between).
    """
    wanted = sorted(set(conversations))
    if not wanted:
        return TimelineUpdate(TIMELINES.empty_table(), frozenset(), ())
    logs = _live_logs(store, wanted, complete, pending)
    if as_of is not None:
        logs = logs.filter(pl.col("expires_at") > as_of)
    rows = _timeline_rows(logs)
    live = frozenset(_pairs(rows))
    return TimelineUpdate(rows, live, tuple(pair for pair in wanted if pair not in live))


def rows_of_conversations(table: pa.Table,
                          conversations: Collection[tuple[str, str]]) -> pa.Table:
    """The rows of ``table`` (with tenant and conversation_id columns) that belong to the
    (tenant, conversation_id) pairs; the table itself when all do (filtering copies rows)."""
    inside = _in_conversations(table, conversations)
    return table if pc.all(inside).as_py() is not False else table.filter(inside)


def _in_conversations(table: pa.Table,
                      conversations: Collection[tuple[str, str]]) -> pa.ChunkedArray:
    keys = pc.binary_join_element_wise(table["tenant"], table["conversation_id"], "\x1f")
    wanted = pa.array(sorted(f"{t}\x1f{c}" for t, c in conversations), pa.string())
    return pc.is_in(keys, value_set=wanted)


def _live_logs(store: LakeStore, wanted: list[tuple[str, str]],
               complete: pa.Table | None, pending: pa.Table | None = None) -> pl.DataFrame:
    """The timeline source columns of the wanted conversations' TurnLogs: from ``complete``
    for the conversations it holds, from the table (and ``pending``) for the others."""
    parts: list[pa.Table] = []
    rest = wanted
    if complete is not None and complete.num_rows:
        held = rows_of_conversations(complete.select(TIMELINE_SOURCE_COLUMNS), wanted)
        inside = _pairs(held)
        parts.append(held)
        rest = [pair for pair in wanted if pair not in inside]
    if rest or not parts:
        parts.append(store.read(Table.TURN_LOGS, columns=TIMELINE_SOURCE_COLUMNS,
                                filter=conversation_filter(rest)))
        if rest and pending is not None and pending.num_rows:
            parts.append(rows_of_conversations(pending.select(TIMELINE_SOURCE_COLUMNS), rest))
    logs = pl.from_arrow(pa.concat_tables(parts) if len(parts) > 1 else parts[0])
    assert isinstance(logs, pl.DataFrame)
    return logs


def _write_rows(store: LakeStore, rows: pa.Table, live: AbstractSet[tuple[str, str]],
                present: AbstractSet[tuple[str, str]]) -> None:
    """Replace the timeline rows of conversations that have one (``present``) and append the
    others.

    A replace evaluates its predicate over every conversation it names (seconds for tens of
    thousands of them), while most conversations of an ingest batch are new: those are simply
    appended, which is safe because writers hold the writer lock between this check and the
    write. A crash between the two commits leaves timelines to refresh, as any crash after the
    TurnLog commit does.
    """
    if not present:
        store.append(Table.TIMELINES, rows)
        return
    if len(present) == len(live):
        store.replace_where(Table.TIMELINES, rows, sql_conversations(sorted(live)))
        return
    known = _in_conversations(rows, present)
    store.replace_where(Table.TIMELINES, rows.filter(known), sql_conversations(sorted(present)))
    store.append(Table.TIMELINES, rows.filter(pc.invert(known)))


def stored_timelines(store: LakeStore, conversations: Collection[tuple[str, str]], *,
                     columns: list[str] | None = None) -> pa.Table:
    """The stored timeline rows (``columns`` of them; all by default) of the given (tenant,
    conversation_id) pairs, those that have one."""
    if not conversations or not store.exists(Table.TIMELINES):
        return TIMELINES.empty_table().select(columns or TIMELINES.names)
    return store.read(Table.TIMELINES, columns=columns, filter=conversation_filter(conversations))


def appended_timelines(stored: pa.Table, logs: pa.Table) -> pa.Table:
    """The timeline rows of conversations once ``logs`` (TurnLogs, at least the timeline's
    source columns) join them, worked out from their ``stored`` timeline rows: the rows
    compute_timelines would give, without reading the conversations' older TurnLogs back
    (a read that grows with each conversation's length, at every turn a host records).

    Valid only when every new turn of a conversation comes after its stored turns (by start,
    then turn id), as a live host's next turns do, and ``stored`` is up to date with them;
    ``stored`` holds a row for each conversation of ``logs``.
    """
    if logs.num_rows == 0:
        return TIMELINES.empty_table()
    frame = pl.from_arrow(logs.select(TIMELINE_SOURCE_COLUMNS))
    assert isinstance(frame, pl.DataFrame)
    tail = pl.from_arrow(_timeline_rows(frame))
    before = pl.from_arrow(stored)
    assert isinstance(tail, pl.DataFrame) and isinstance(before, pl.DataFrame)
    keys = ["tenant", "conversation_id"]
    joined = before.join(tail, on=keys, how="inner", suffix="_new")
    if joined.height != tail.height:
        raise ValueError("appended_timelines: a conversation of the new turns has no stored "
                         "timeline row")

    def inner(column: str) -> pl.Expr:
        text = pl.col(column).str.strip_prefix("[").str.strip_suffix("]")
        return pl.when(text == "").then(None).otherwise(text)

    grown = joined.with_columns(
        pl.coalesce("title_new", "title").alias("title"),
        pl.max_horizontal("last_activity_at", "last_activity_at_new").alias("last_activity_at"),
        pl.col("last_turn_id_new").alias("last_turn_id"),
        (pl.col("turn_count") + pl.col("turn_count_new")).alias("turn_count"),
        (pl.lit("[") + pl.concat_str(inner("blocks"), inner("blocks_new"), separator=",",
                                     ignore_nulls=True) + pl.lit("]")).alias("blocks"),
        pl.max_horizontal("expires_at", "expires_at_new").alias("expires_at"),
        pl.col("updated_at_new").alias("updated_at"))
    return grown.select(TIMELINES.names).to_arrow().cast(TIMELINES)


def _pairs(rows: pa.Table) -> set[tuple[str, str]]:
    """The (tenant, conversation_id) pairs of rows."""
    return set(zip(rows["tenant"].to_pylist(), rows["conversation_id"].to_pylist(), strict=True))

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
    if logs.height == 0:
        return TIMELINES.empty_table()
    ordered = logs.sort(["tenant", "conversation_id", "started_at", "turn_id"])
    # Blocks are JSON arrays per turn; a conversation's list is their concatenation in order.
    inner = pl.col("blocks").str.strip_prefix("[").str.strip_suffix("]")
    grouped = (ordered.with_columns(inner.alias("_blocks"))
               .group_by(["tenant", "conversation_id"], maintain_order=True)
               .agg(pl.col("app").first(), pl.col("agent").first(),
                    pl.col("user_id").first(),
                    pl.col("title").drop_nulls().filter(pl.col("title").drop_nulls() != "")
                    .last().alias("title"),
                    pl.col("started_at").first(),
                    pl.col("ended_at").max().alias("last_activity_at"),
                    pl.col("turn_id").last().alias("last_turn_id"),
                    pl.len().cast(pl.Int32).alias("turn_count"),
                    pl.col("_blocks").filter(pl.col("_blocks") != "").str.join(",")
                    .alias("_joined"),
                    pl.col("expires_at").max()))
    frame = grouped.with_columns(
        pl.lit(TIMELINE_SCHEMA_ID).alias("schema"),
        (pl.lit("[") + pl.col("_joined").fill_null("") + pl.lit("]")).alias("blocks"),
        pl.lit(datetime.now(UTC)).dt.cast_time_unit("us").alias("updated_at"))
    return frame.select(TIMELINES.names).to_arrow().cast(TIMELINES)
