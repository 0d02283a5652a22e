"""The writers: project accepted turn records into the rows of every lake table.

A minimal writer's turn yields one TurnLog, one ``user`` row per folded submission and one
``assistant`` row for the completion. A rich writer adds ``summary``, ``anchor``, ``note`` and
``attachment`` rows and timeline blocks. Rows are accumulated column by column so a batch of
tens of thousands of turns becomes one Arrow table per Delta table without per-row objects.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pyarrow as pa

from lake.records import TurnRecord
from lake.tables import CONTENT_ROWS, EVENTS, FILES, TURN_LOGS, Table

# (tenant, app, role or None) -> ttl days, from the settings' policy.
TtlPolicy = Callable[[str, str, str | None], int]


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


def row_id(conversation_id: str, turn_id: str, role: str, seq: int) -> str:
    """The stable id of a content row, unique within its tenant."""
    return f"{conversation_id}.{turn_id}.{role}.{seq}"


def timeline_blocks(record: TurnRecord, files: list[StoredFile]) -> list[dict[str, Any]]:
    """The blocks a turn adds to its conversation's conv.timeline.v1 (empty for minimal writers).

    Blocks name what was accepted, with times and refs, never the texts themselves.
    """
    if record.writer != "rich":
        return []
    cid, tid = record.conversation_id, record.turn_id
    base = f"conv_{cid}.turn_{tid}"
    blocks: list[dict[str, Any]] = [
        {"turn_id": tid, "type": f"user.{s.event_type}", "at": s.arrived_at.isoformat(),
         "ref": f"conv:ar:{base}.submissions/{i}"}
        for i, s in enumerate(record.submissions)
    ]
    blocks += [{"turn_id": tid, "type": "attachment", "at": record.started_at.isoformat(),
                "ref": a.ref or f"conv:ar:{base}.attachments/{i}"}
               for i, a in enumerate(record.attachments)]
    blocks += [{"turn_id": tid, "type": "file", "at": record.ended_at.isoformat(), "ref": f.ref}
               for f in files]
    if record.summary:
        blocks.append({"turn_id": tid, "type": "summary", "at": record.ended_at.isoformat(),
                       "ref": f"conv:ws:{base}.summary"})
    blocks.append({"turn_id": tid, "type": "assistant.completion",
                   "at": record.completion.at.isoformat(), "ref": f"conv:ar:{base}.completion"})
    return blocks


class TurnProjector:
    """Accumulates the rows of many turns; ``tables()`` returns one Arrow table per Delta table."""

    def __init__(self, *, batch_id: str, ingested_at: datetime, ttl: TtlPolicy) -> None:
        self._batch_id = batch_id
        self._ingested_at = ingested_at
        self._ttl = ttl
        self._cols: dict[Table, defaultdict[str, list[Any]]] = {
            t: defaultdict(list) for t in (Table.TURN_LOGS, Table.CONTENT_ROWS, Table.EVENTS,
                                           Table.FILES)
        }
        self.turns = 0

    def add(self, record: TurnRecord, *, ordinal: int, files: list[StoredFile],
            payload: str) -> None:
        """Project one accepted record (its hosted files already stored) into rows."""
        month = month_of(record.started_at)
        turn_expiry = self._expiry(record, None)
        self._add_content_rows(record, month)
        self._add_events(record, month, turn_expiry)
        self._add_files(record, month, files, turn_expiry)
        blocks = timeline_blocks(record, files)
        usage, feedback = record.usage, record.feedback
        c = self._cols[Table.TURN_LOGS]
        for name, value in (
            ("tenant", record.tenant), ("month", month), ("app", record.app),
            ("agent", record.agent), ("user_id", record.user_id),
            ("conversation_id", record.conversation_id), ("turn_id", record.turn_id),
            ("writer", record.writer), ("started_at", record.started_at),
            ("ended_at", record.ended_at), ("ordinal", ordinal),
            ("submission_count", len(record.submissions)),
            ("block_count", len(blocks)), ("attachment_count", len(record.attachments)),
            ("hosted_file_count", len(files)),
            ("tokens_in", usage.tokens_in if usage else None),
            ("tokens_out", usage.tokens_out if usage else None),
            ("cost_usd", usage.cost_usd if usage else None),
            ("duration_ms", usage.duration_ms if usage else None),
            ("feedback_rating", feedback.rating if feedback else None),
            ("feedback_has_comment", bool(feedback and feedback.comment)),
            ("blocks", orjson.dumps(blocks).decode() if blocks else "[]"),
            ("title", record.conversation_title), ("expires_at", turn_expiry),
            ("ingested_at", self._ingested_at), ("batch_id", self._batch_id),
            ("payload", payload),
        ):
            c[name].append(value)
        self.turns += 1

    def tables(self) -> dict[Table, pa.Table]:
        """The accumulated rows as Arrow tables in the lake's schemas."""
        schemas = {Table.TURN_LOGS: TURN_LOGS, Table.CONTENT_ROWS: CONTENT_ROWS,
                   Table.EVENTS: EVENTS, Table.FILES: FILES}
        out: dict[Table, pa.Table] = {}
        for table, schema in schemas.items():
            cols = self._cols[table]
            if not cols:
                out[table] = schema.empty_table()
                continue
            out[table] = pa.Table.from_pydict({n: cols[n] for n in schema.names}, schema=schema)
        return out

    def _expiry(self, record: TurnRecord, role: str | None) -> datetime:
        days = record.ttl_days or self._ttl(record.tenant, record.app, role)
        return record.ended_at + timedelta(days=days)

    def _add_content_rows(self, record: TurnRecord, month: str) -> None:
        rows: list[tuple[str, int, str | None, int | None, datetime, str]] = [
            ("user", i, s.event_type, s.batch, s.arrived_at, s.text)
            for i, s in enumerate(record.submissions)
        ]
        rows.append(("assistant", 0, None, None, record.completion.at, record.completion.text))
        if record.writer == "rich":
            if record.summary:
                rows.append(("summary", 0, None, None, record.ended_at, record.summary))
            rows += [("anchor", i, None, None, record.ended_at, a)
                     for i, a in enumerate(record.anchors)]
            rows += [("note", i, None, None, record.ended_at, n)
                     for i, n in enumerate(record.notes)]
        # Attachment text is searchable whenever the writer extracted it.
        rows += [("attachment", i, None, None, record.started_at, a.text)
                 for i, a in enumerate(record.attachments) if a.text]
        c = self._cols[Table.CONTENT_ROWS]
        expiry_by_role: dict[str, datetime] = {}
        for role, seq, event_type, batch, ts, text in rows:
            if role not in expiry_by_role:
                expiry_by_role[role] = self._expiry(record, role)
            c["tenant"].append(record.tenant)
            c["month"].append(month)
            c["row_id"].append(row_id(record.conversation_id, record.turn_id, role, seq))
            c["app"].append(record.app)
            c["agent"].append(record.agent)
            c["user_id"].append(record.user_id)
            c["conversation_id"].append(record.conversation_id)
            c["turn_id"].append(record.turn_id)
            c["role"].append(role)
            c["seq"].append(seq)
            c["event_type"].append(event_type)
            c["batch"].append(batch)
            c["ts"].append(ts)
            c["turn_at"].append(record.started_at)
            c["text"].append(text)
            c["expires_at"].append(expiry_by_role[role])
            c["embedding"].append(None)
            c["embedding_model"].append(None)
            c["embedding_status"].append("pending")
            c["batch_id"].append(self._batch_id)

    def _add_events(self, record: TurnRecord, month: str, expiry: datetime) -> None:
        items: list[tuple[datetime, str, str, dict[str, Any]]] = []
        items += [(e.at, "context", f"context.{e.kind}", e.data) for e in record.context_events]
        items += [(s.at, "step", "chat.step",
                   {"name": s.name, "status": s.status, "detail": s.detail})
                  for s in record.steps]
        items += [(e.at, "event", e.type, e.data) for e in record.events]
        # Stable sort keeps the record's own order for events at the same instant.
        items.sort(key=lambda item: item[0])
        c = self._cols[Table.EVENTS]
        for seq, (at, source, type_, data) in enumerate(items):
            c["tenant"].append(record.tenant)
            c["month"].append(month)
            c["user_id"].append(record.user_id)
            c["conversation_id"].append(record.conversation_id)
            c["turn_id"].append(record.turn_id)
            c["seq"].append(seq)
            c["source"].append(source)
            c["type"].append(type_)
            c["at"].append(at)
            c["data"].append(orjson.dumps(data).decode())
            c["expires_at"].append(expiry)
            c["batch_id"].append(self._batch_id)

    def _add_files(self, record: TurnRecord, month: str, files: list[StoredFile],
                   expiry: datetime) -> None:
        c = self._cols[Table.FILES]
        for f in files:
            for name, value in (
                ("tenant", record.tenant), ("month", month), ("ref", f.ref),
                ("user_id", record.user_id), ("conversation_id", record.conversation_id),
                ("turn_id", record.turn_id), ("path", f.path), ("mime", f.mime),
                ("size", f.size), ("sha256", f.sha256), ("description", f.description),
                ("storage_key", f.storage_key), ("expires_at", expiry),
                ("batch_id", self._batch_id),
            ):
                c[name].append(value)
