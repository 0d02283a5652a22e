"""Arrow schemas of the lake's Delta tables: the one place pipeline and app agree on columns."""

from __future__ import annotations

from enum import StrEnum

import pyarrow as pa

from lake.search.defaults import DEFAULT_SEARCH_ROLES as DEFAULT_SEARCH_ROLES

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
# A turn's exchange: what the person said and what the agent answered. The lexical index gives
# every such row its turn's exchange text, and the semantic arm values a turn by the sum of
# these rows' vectors; the other roles stand alone.
EXCHANGE_ROLES = frozenset({"user", "assistant"})

# Partitioning: tenant × month of the turn's started_at ("2026-11"); timelines span months.
MONTH_PARTITIONS = ["tenant", "month"]
TENANT_PARTITIONS = ["tenant"]

# Each column's type, written once: a column name has the same type in every table, so a
# table's schema is the list of its column names (see ``_schema``).
_COLUMN_TYPES: dict[str, pa.DataType] = {
    **dict.fromkeys((
        "tenant", "month", "app", "agent", "user_id", "conversation_id", "turn_id", "row_id",
        "writer", "blocks", "title", "batch_id", "payload", "role", "event_type", "text",
        "embedding_model", "embedding_status", "schema", "last_turn_id", "source", "type",
        "data", "ref", "path", "mime", "sha256", "description", "storage_key", "source_file",
        "reason", "raw", "action", "actor", "target", "counts",
    ), pa.string()),
    # how the turn's completion ended: "completed", "interrupted" or "failed" (the record's
    # completion.status); null on a turn_logs row written before the column existed, which
    # reads as unknown (docs/workbench.md, Overview)
    "completion_status": pa.string(),
    **dict.fromkeys((
        "started_at", "ended_at", "expires_at", "ingested_at", "ts", "turn_at",
        "last_activity_at", "updated_at", "at", "quarantined_at",
    ), TS),
    **dict.fromkeys((
        "ordinal", "submission_count", "block_count", "attachment_count", "hosted_file_count",
        "feedback_rating", "seq", "batch", "turn_count",
    ), pa.int32()),
    **dict.fromkeys(("tokens_in", "tokens_out", "duration_ms", "size", "line"), pa.int64()),
    "cost_usd": pa.float64(),
    "feedback_has_comment": pa.bool_(),
    # the vector stands for the text's opening and an even sample of the rest (a text longer
    # than embed_max_passages passages); null until embedded (lake.embedding.rows)
    "embedding_sampled": pa.bool_(),
    "embedding": pa.list_(pa.float32()),
    # a text longer than the model reads: its passages' unit vectors, one after another (null
    # for a text that fits; lake.embedding.passages)
    "passage_embeddings": pa.list_(pa.float32()),
}


def _schema(*columns: str) -> pa.Schema:
    """The schema of a table with ``columns``, in order, each of its one type."""
    return pa.schema([(name, _COLUMN_TYPES[name]) for name in columns])


TURN_LOGS = _schema(
    "tenant", "month", "app", "agent", "user_id", "conversation_id", "turn_id", "writer",
    "started_at", "ended_at", "ordinal", "submission_count", "block_count", "attachment_count",
    "hosted_file_count", "tokens_in", "tokens_out", "cost_usd", "duration_ms",
    "feedback_rating", "feedback_has_comment", "blocks", "title", "expires_at", "ingested_at",
    "batch_id", "payload", "completion_status",
)

# Columns of turn_logs that are compact accounting (everything but the reload payload).
TURN_LOG_INDEX_COLUMNS = [n for n in TURN_LOGS.names if n != "payload"]

CONTENT_ROWS = _schema(
    "tenant", "month", "row_id", "app", "agent", "user_id", "conversation_id", "turn_id",
    "role", "seq", "event_type", "batch", "ts", "turn_at", "text", "expires_at", "embedding",
    "embedding_model", "embedding_status", "batch_id", "passage_embeddings",
    "embedding_sampled",
)

TIMELINES = _schema(
    "tenant", "conversation_id", "schema", "app", "agent", "user_id", "title", "started_at",
    "last_activity_at", "last_turn_id", "turn_count", "blocks", "expires_at", "updated_at",
)

EVENTS = _schema(
    "tenant", "month", "user_id", "conversation_id", "turn_id", "seq", "source", "type", "at",
    "data", "expires_at", "batch_id",
)

FILES = _schema(
    "tenant", "month", "ref", "user_id", "conversation_id", "turn_id", "path", "mime", "size",
    "sha256", "description", "storage_key", "expires_at", "batch_id",
)

QUARANTINE = _schema(
    "quarantined_at", "source_file", "line", "reason", "raw", "batch_id",
)

AUDIT = _schema(
    "at", "action", "actor", "tenant", "target", "counts",
)

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
    **dict.fromkeys(
        (Table.TURN_LOGS, Table.CONTENT_ROWS, Table.EVENTS, Table.FILES), MONTH_PARTITIONS),
    Table.TIMELINES: TENANT_PARTITIONS,
    Table.QUARANTINE: [],
    Table.AUDIT: [],
}
