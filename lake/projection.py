"""The writers: project accepted turn records into the rows of every lake table.

A minimal writer's turn yields one TurnLog, one ``user`` row per folded submission and one
``assistant`` row for the completion. A rich writer adds ``summary``, ``anchor``, ``note`` and
``attachment`` rows and timeline blocks.

Ingest projects tens of thousands of turns per batch, so the per-turn Python work is kept to
what only Python can do (walking the record): each row becomes one tuple of the values that
vary per row, and everything derivable (months, expiry instants, row ids, the per-turn columns
repeated on every row of the turn) is computed column-wise in Arrow when ``tables()`` builds
one Arrow table per Delta table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from lake.records import TurnRecord
from lake.tables import CONTENT_ROWS, EVENTS, FILES, ROLES, TS, TURN_LOGS, Table

# (tenant, app, role or None) -> ttl days, from the settings' policy.
TtlPolicy = Callable[[str, str, str | None], int]

_DAY_US = 86_400_000_000
_MAX_US = (datetime.max.replace(tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
    microseconds=1)
_STRING = pa.string()
_INT32 = pa.int32()
_INT64 = pa.int64()
# The roles a TTL is looked up for; None is the TurnLog's own (and its events' and files').
_TTL_ROLES: tuple[str | None, ...] = (None, *ROLES)
_first = itemgetter(0)


@dataclass(frozen=True)
class StoredFile:
    """A hosted file whose bytes are already in the file store."""

    ref: str
    path: str
    mime: str
    size: int
    sha256: str
    storage_key: str
    description: str | None


def month_of(dt: datetime) -> str:
    """The partition month ("YYYY-MM", UTC) of a timestamp."""
    return dt.astimezone(UTC).strftime("%Y-%m")


def months_of(instants: pa.Array) -> pa.Array:
    """The partition months ("YYYY-MM", UTC) of an array of UTC timestamps."""
    return pc.strftime(instants, format="%Y-%m")


def row_id(conversation_id: str, turn_id: str, role: str, seq: int) -> str:
    """The stable id of a content row, unique within its tenant."""
    return f"{conversation_id}.{turn_id}.{role}.{seq}"


def timeline_blocks(record: TurnRecord, files: list[StoredFile]) -> list[dict[str, Any]]:
    """The blocks a turn adds to its conversation's conv.timeline.v1 (empty for minimal writers).

    Blocks name what was accepted, with times and refs, never the texts themselves.
    """
    if record.writer != "rich":
        return []
    tid = record.turn_id
    base = f"conv_{record.conversation_id}.turn_{tid}"
    blocks: list[dict[str, Any]] = [
        {"turn_id": tid, "type": f"user.{s.event_type}", "at": s.arrived_at.isoformat(),
         "ref": f"conv:ar:{base}.submissions/{i}"}
        for i, s in enumerate(record.submissions)
    ]
    # Several blocks share the turn's start or end: each instant is formatted once.
    if record.attachments:
        started = record.started_at.isoformat()
        blocks += [{"turn_id": tid, "type": "attachment", "at": started,
                    "ref": a.ref or f"conv:ar:{base}.attachments/{i}"}
                   for i, a in enumerate(record.attachments)]
    if files or record.summary:
        ended = record.ended_at.isoformat()
        blocks += [{"turn_id": tid, "type": "file", "at": ended, "ref": f.ref} for f in files]
        if record.summary:
            blocks.append({"turn_id": tid, "type": "summary", "at": ended,
                           "ref": f"conv:ws:{base}.summary"})
    blocks.append({"turn_id": tid, "type": "assistant.completion",
                   "at": record.completion.at.isoformat(), "ref": f"conv:ar:{base}.completion"})
    return blocks


# A content row: turn index, role, seq, event type, batch, time, text, ttl days.
_ContentRow = tuple[int, str, int, str | None, int | None, datetime, str, int]
# An event row: turn index, seq, source, type, time, data as JSON.
_EventRow = tuple[int, int, str, str, datetime, str]
# A files row: turn index, then the StoredFile's fields in FILES column order.
_FileRow = tuple[int, str, str, str, int, str, str | None, str]


class TurnProjector:
    """Accumulates the rows of many turns; ``tables()`` returns one Arrow table per Delta table."""

    def __init__(self, *, batch_id: str, ingested_at: datetime, ttl: TtlPolicy) -> None:
        self._batch_id = batch_id
        self._ingested_at = ingested_at
        self._ttl = ttl
        # The policy is a pure function of the settings; most turns share (tenant, app), and
        # records with their own ttl_days share a few values: role -> days, cached per each.
        self._policy_days: dict[tuple[str, str], dict[str | None, int]] = {}
        self._own_days: dict[int, dict[str | None, int]] = {}
        self._turns: list[tuple[Any, ...]] = []
        self._content: list[_ContentRow] = []
        self._events: list[_EventRow] = []
        self._files: list[_FileRow] = []
        self.turns = 0

    def add(self, record: TurnRecord, *, ordinal: int, files: list[StoredFile],
            payload: str) -> None:
        """Project one accepted record (its hosted files already stored) into rows."""
        turn = self.turns
        days = self._days_by_role(record)
        self._add_content_rows(turn, record, days)
        self._add_events(turn, record)
        self._files += [(turn, f.ref, f.path, f.mime, f.size, f.sha256, f.description,
                         f.storage_key) for f in files]
        blocks = timeline_blocks(record, files)
        usage, feedback = record.usage, record.feedback
        self._turns.append((
            record.tenant, record.app, record.agent, record.user_id, record.conversation_id,
            record.turn_id, record.writer, record.started_at, record.ended_at, ordinal,
            len(record.submissions), len(blocks), len(record.attachments), len(files),
            usage.tokens_in if usage else None, usage.tokens_out if usage else None,
            usage.cost_usd if usage else None, usage.duration_ms if usage else None,
            feedback.rating if feedback else None, bool(feedback and feedback.comment),
            orjson.dumps(blocks).decode() if blocks else "[]", record.conversation_title,
            days[None], payload))
        self.turns += 1

    def tables(self) -> dict[Table, pa.Table]:
        """The accumulated rows as Arrow tables in the lake's schemas."""
        if not self._turns:
            return {t: s.empty_table() for t, s in ((Table.TURN_LOGS, TURN_LOGS),
                                                    (Table.CONTENT_ROWS, CONTENT_ROWS),
                                                    (Table.EVENTS, EVENTS), (Table.FILES, FILES))}
        (tenant, app, agent, user, cid, tid, writer, started, ended, ordinal, submissions,
         blocks, attachments, hosted, tokens_in, tokens_out, cost, duration, rating, commented,
         blocks_json, title, days, payload) = zip(*self._turns, strict=True)
        started_at = pa.array(started, TS)
        turn = _Turns(
            tenant=pa.array(tenant, _STRING), month=months_of(started_at),
            app=pa.array(app, _STRING), agent=pa.array(agent, _STRING),
            user_id=pa.array(user, _STRING), conversation_id=pa.array(cid, _STRING),
            turn_id=pa.array(tid, _STRING), started_at=started_at,
            ended_at=pa.array(ended, TS))
        expires_at = _plus_days(turn.ended_at, pa.array(days, _INT64))
        n = len(self._turns)
        logs = {
            "tenant": turn.tenant, "month": turn.month, "app": turn.app, "agent": turn.agent,
            "user_id": turn.user_id, "conversation_id": turn.conversation_id,
            "turn_id": turn.turn_id, "writer": pa.array(writer, _STRING),
            "started_at": turn.started_at, "ended_at": turn.ended_at,
            "ordinal": pa.array(ordinal, _INT32),
            "submission_count": pa.array(submissions, _INT32),
            "block_count": pa.array(blocks, _INT32),
            "attachment_count": pa.array(attachments, _INT32),
            "hosted_file_count": pa.array(hosted, _INT32),
            "tokens_in": pa.array(tokens_in, _INT64), "tokens_out": pa.array(tokens_out, _INT64),
            "cost_usd": pa.array(cost, pa.float64()), "duration_ms": pa.array(duration, _INT64),
            "feedback_rating": pa.array(rating, _INT32),
            "feedback_has_comment": pa.array(commented, pa.bool_()),
            "blocks": pa.array(blocks_json, _STRING), "title": pa.array(title, _STRING),
            "expires_at": expires_at, "ingested_at": _constant(self._ingested_at, TS, n),
            "batch_id": _constant(self._batch_id, _STRING, n),
            "payload": pa.array(payload, _STRING),
        }
        return {
            Table.TURN_LOGS: pa.Table.from_pydict(logs, schema=TURN_LOGS),
            Table.CONTENT_ROWS: self._content_table(turn),
            Table.EVENTS: self._events_table(turn, expires_at),
            Table.FILES: self._files_table(turn, expires_at),
        }

    def _days_by_role(self, record: TurnRecord) -> dict[str | None, int]:
        """The TTL in days of each role's rows (None: the TurnLog's) for a record: its own
        ``ttl_days``, else the policy's for its tenant and app."""
        own = record.ttl_days
        if own:
            days = self._own_days.get(own)
            if days is None:
                days = self._own_days[own] = dict.fromkeys(_TTL_ROLES, own)
            return days
        key = (record.tenant, record.app)
        days = self._policy_days.get(key)
        if days is None:
            days = self._policy_days[key] = {role: self._ttl(*key, role) for role in _TTL_ROLES}
        return days

    def _add_content_rows(self, turn: int, record: TurnRecord,
                          days: dict[str | None, int]) -> None:
        user, assistant = days["user"], days["assistant"]
        rows = self._content
        rows += [(turn, "user", i, s.event_type, s.batch, s.arrived_at, s.text, user)
                 for i, s in enumerate(record.submissions)]
        rows.append((turn, "assistant", 0, None, None, record.completion.at,
                     record.completion.text, assistant))
        if record.writer == "rich":
            ended = record.ended_at
            if record.summary:
                rows.append((turn, "summary", 0, None, None, ended, record.summary,
                             days["summary"]))
            if record.anchors:
                anchor = days["anchor"]
                rows += [(turn, "anchor", i, None, None, ended, a, anchor)
                         for i, a in enumerate(record.anchors)]
            if record.notes:
                note = days["note"]
                rows += [(turn, "note", i, None, None, ended, n, note)
                         for i, n in enumerate(record.notes)]
        # Attachment text is searchable whenever the writer extracted it.
        if record.attachments:
            started, attachment = record.started_at, days["attachment"]
            rows += [(turn, "attachment", i, None, None, started, a.text, attachment)
                     for i, a in enumerate(record.attachments) if a.text]

    def _add_events(self, turn: int, record: TurnRecord) -> None:
        if not (record.context_events or record.steps or record.events):
            return
        items: list[tuple[datetime, str, str, dict[str, Any]]] = []
        items += [(e.at, "context", f"context.{e.kind}", e.data) for e in record.context_events]
        items += [(s.at, "step", "chat.step",
                   {"name": s.name, "status": s.status, "detail": s.detail})
                  for s in record.steps]
        items += [(e.at, "event", e.type, e.data) for e in record.events]
        # Stable sort keeps the record's own order for events at the same instant.
        items.sort(key=_first)
        self._events += [(turn, seq, source, type_, at, orjson.dumps(data).decode())
                         for seq, (at, source, type_, data) in enumerate(items)]

    def _content_table(self, turn: _Turns) -> pa.Table:
        if not self._content:
            return CONTENT_ROWS.empty_table()
        index, role, seq, event_type, batch, ts, text, days = zip(*self._content, strict=True)
        rows = turn.take(pa.array(index, _INT32))
        role_array, seq_array = pa.array(role, _STRING), pa.array(seq, _INT32)
        n = len(index)
        return pa.Table.from_pydict({
            "tenant": rows.tenant, "month": rows.month,
            "row_id": pc.binary_join_element_wise(
                rows.conversation_id, rows.turn_id, role_array, seq_array.cast(_STRING), "."),
            "app": rows.app, "agent": rows.agent, "user_id": rows.user_id,
            "conversation_id": rows.conversation_id, "turn_id": rows.turn_id,
            "role": role_array, "seq": seq_array, "event_type": pa.array(event_type, _STRING),
            "batch": pa.array(batch, _INT32), "ts": pa.array(ts, TS),
            "turn_at": rows.started_at, "text": pa.array(text, _STRING),
            "expires_at": _plus_days(rows.ended_at, pa.array(days, _INT64)),
            "embedding": pa.nulls(n, CONTENT_ROWS.field("embedding").type),
            "embedding_model": pa.nulls(n, _STRING),
            "embedding_status": _constant("pending", _STRING, n),
            "batch_id": _constant(self._batch_id, _STRING, n),
        }, schema=CONTENT_ROWS)

    def _events_table(self, turn: _Turns, expires_at: pa.Array) -> pa.Table:
        if not self._events:
            return EVENTS.empty_table()
        index, seq, source, type_, at, data = zip(*self._events, strict=True)
        take = pa.array(index, _INT32)
        rows = turn.take(take)
        return pa.Table.from_pydict({
            "tenant": rows.tenant, "month": rows.month, "user_id": rows.user_id,
            "conversation_id": rows.conversation_id, "turn_id": rows.turn_id,
            "seq": pa.array(seq, _INT32), "source": pa.array(source, _STRING),
            "type": pa.array(type_, _STRING), "at": pa.array(at, TS),
            "data": pa.array(data, _STRING), "expires_at": expires_at.take(take),
            "batch_id": _constant(self._batch_id, _STRING, len(index)),
        }, schema=EVENTS)

    def _files_table(self, turn: _Turns, expires_at: pa.Array) -> pa.Table:
        if not self._files:
            return FILES.empty_table()
        index, ref, path, mime, size, sha256, description, key = zip(*self._files, strict=True)
        take = pa.array(index, _INT32)
        rows = turn.take(take)
        return pa.Table.from_pydict({
            "tenant": rows.tenant, "month": rows.month, "ref": pa.array(ref, _STRING),
            "user_id": rows.user_id, "conversation_id": rows.conversation_id,
            "turn_id": rows.turn_id, "path": pa.array(path, _STRING),
            "mime": pa.array(mime, _STRING), "size": pa.array(size, _INT64),
            "sha256": pa.array(sha256, _STRING), "description": pa.array(description, _STRING),
            "storage_key": pa.array(key, _STRING), "expires_at": expires_at.take(take),
            "batch_id": _constant(self._batch_id, _STRING, len(index)),
        }, schema=FILES)


@dataclass(frozen=True)
class _Turns:
    """The per-turn columns every table repeats on each row of the turn."""

    tenant: pa.Array
    month: pa.Array
    app: pa.Array
    agent: pa.Array
    user_id: pa.Array
    conversation_id: pa.Array
    turn_id: pa.Array
    started_at: pa.Array
    ended_at: pa.Array

    def take(self, index: pa.Array) -> _Turns:
        """These columns for a row per entry of ``index`` (a turn number)."""
        return _Turns(*(getattr(self, f.name).take(index) for f in fields(self)))


def _plus_days(instants: pa.Array, days: pa.Array) -> pa.Array:
    """``instants`` + ``days`` whole days, as timestamps (what ``datetime + timedelta`` gives).

    Like that addition, a result past year 9999 (only a TTL policy of millennia gets there)
    raises OverflowError rather than storing an instant no reader could load.
    """
    total = pc.add_checked(instants.cast(_INT64), pc.multiply_checked(days, _DAY_US))
    latest = pc.max(total).as_py()
    if latest is not None and latest > _MAX_US:
        raise OverflowError("date value out of range")
    return total.cast(TS)


def _constant(value: object, type_: pa.DataType, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, type_), n)
