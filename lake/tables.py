"""Arrow schemas of the lake's Delta tables: the one place pipeline and app agree on columns."""

from __future__ import annotations

from enum import StrEnum

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")


class Table(StrEnum):
    """The lake's tables (folder names under ``<lake>/tables``)."""

    TURN_LOGS = "turn_logs"
    CONTENT_ROWS = "content_rows"
    TIMELINES = "timelines"
    EVENTS = "events"
    FILES = "files"
    QUARANTINE = "quarantine"
    AUDIT = "audit"


ROLES = ("user", "assistant", "summary", "anchor", "note", "attachment")
DEFAULT_SEARCH_ROLES = ("user", "assistant", "summary", "anchor", "attachment")

# Partitioning: tenant × month of the turn's started_at ("2026-11"); timelines span months.
MONTH_PARTITIONS = ["tenant", "month"]
TENANT_PARTITIONS = ["tenant"]

TURN_LOGS = pa.schema([
    ("tenant", pa.string()),
    ("month", pa.string()),
    ("app", pa.string()),
    ("agent", pa.string()),
    ("user_id", pa.string()),
    ("conversation_id", pa.string()),
    ("turn_id", pa.string()),
    ("writer", pa.string()),
    ("started_at", TS),
    ("ended_at", TS),
    ("ordinal", pa.int32()),
    ("submission_count", pa.int32()),
    ("block_count", pa.int32()),
    ("attachment_count", pa.int32()),
    ("hosted_file_count", pa.int32()),
    ("tokens_in", pa.int64()),
    ("tokens_out", pa.int64()),
    ("cost_usd", pa.float64()),
    ("duration_ms", pa.int64()),
    ("feedback_rating", pa.int32()),
    ("feedback_has_comment", pa.bool_()),
    ("blocks", pa.string()),
    ("title", pa.string()),
    ("expires_at", TS),
    ("ingested_at", TS),
    ("batch_id", pa.string()),
    ("payload", pa.string()),
])

# Columns of turn_logs that are compact accounting (everything but the reload payload).
TURN_LOG_INDEX_COLUMNS = [n for n in TURN_LOGS.names if n != "payload"]

CONTENT_ROWS = pa.schema([
    ("tenant", pa.string()),
    ("month", pa.string()),
    ("row_id", pa.string()),
    ("app", pa.string()),
    ("agent", pa.string()),
    ("user_id", pa.string()),
    ("conversation_id", pa.string()),
    ("turn_id", pa.string()),
    ("role", pa.string()),
    ("seq", pa.int32()),
    ("event_type", pa.string()),
    ("batch", pa.int32()),
    ("ts", TS),
    ("turn_at", TS),
    ("text", pa.string()),
    ("expires_at", TS),
    ("embedding", pa.list_(pa.float32())),
    ("embedding_model", pa.string()),
    ("embedding_status", pa.string()),
    ("batch_id", pa.string()),
])

TIMELINES = pa.schema([
    ("tenant", pa.string()),
    ("conversation_id", pa.string()),
    ("schema", pa.string()),
    ("app", pa.string()),
    ("agent", pa.string()),
    ("user_id", pa.string()),
    ("title", pa.string()),
    ("started_at", TS),
    ("last_activity_at", TS),
    ("last_turn_id", pa.string()),
    ("turn_count", pa.int32()),
    ("blocks", pa.string()),
    ("expires_at", TS),
    ("updated_at", TS),
])

EVENTS = pa.schema([
    ("tenant", pa.string()),
    ("month", pa.string()),
    ("user_id", pa.string()),
    ("conversation_id", pa.string()),
    ("turn_id", pa.string()),
    ("seq", pa.int32()),
    ("source", pa.string()),
    ("type", pa.string()),
    ("at", TS),
    ("data", pa.string()),
    ("expires_at", TS),
    ("batch_id", pa.string()),
])

FILES = pa.schema([
    ("tenant", pa.string()),
    ("month", pa.string()),
    ("ref", pa.string()),
    ("user_id", pa.string()),
    ("conversation_id", pa.string()),
    ("turn_id", pa.string()),
    ("path", pa.string()),
    ("mime", pa.string()),
    ("size", pa.int64()),
    ("sha256", pa.string()),
    ("description", pa.string()),
    ("storage_key", pa.string()),
    ("expires_at", TS),
    ("batch_id", pa.string()),
])

QUARANTINE = pa.schema([
    ("quarantined_at", TS),
    ("source_file", pa.string()),
    ("line", pa.int64()),
    ("reason", pa.string()),
    ("raw", pa.string()),
    ("batch_id", pa.string()),
])

AUDIT = pa.schema([
    ("at", TS),
    ("action", pa.string()),
    ("actor", pa.string()),
    ("tenant", pa.string()),
    ("target", pa.string()),
    ("counts", pa.string()),
])

SCHEMAS: dict[Table, pa.Schema] = {
    Table.TURN_LOGS: TURN_LOGS,
    Table.CONTENT_ROWS: CONTENT_ROWS,
    Table.TIMELINES: TIMELINES,
    Table.EVENTS: EVENTS,
    Table.FILES: FILES,
    Table.QUARANTINE: QUARANTINE,
    Table.AUDIT: AUDIT,
}

PARTITIONS: dict[Table, list[str]] = {
    Table.TURN_LOGS: MONTH_PARTITIONS,
    Table.CONTENT_ROWS: MONTH_PARTITIONS,
    Table.TIMELINES: TENANT_PARTITIONS,
    Table.EVENTS: MONTH_PARTITIONS,
    Table.FILES: MONTH_PARTITIONS,
    Table.QUARANTINE: [],
    Table.AUDIT: [],
}
