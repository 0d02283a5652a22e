"""The turn record ``turnlake.turn.v1``: one JSON object per accepted turn.

These pydantic models are the single source of truth for the record format; the JSON Schema
published in ``lake/schema/turn.v1.schema.json`` is generated from them (``turnlake schema``).
Field names are a contract shared with other writers: add optional fields, never rename.
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from lake.errors import RecordError

SCHEMA_ID = "turnlake.turn.v1"
ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"

Id = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
EventType = Literal["prompt", "followup", "steer"]
Writer = Literal["minimal", "rich"]
StepStatus = Literal["started", "completed", "failed"]
CompletionStatus = Literal["completed", "interrupted", "failed"]

# Every instant must convert to UTC and take the longest TTL (100 years) without leaving
# Python's datetime range; outside it the projection would crash the whole batch.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
INT64_MAX = 2**63 - 1
# The fields of every hosted file that carry its bytes (see TurnRecord.to_json).
_HOSTED_BYTES = {"hosted_files": {"__all__": {"content_b64", "source_path"}}}


# Native constraints run inside pydantic-core (a Python validator per timestamp cost more
# than the rest of the record's validation).
Instant = Annotated[AwareDatetime, Field(ge=EARLIEST, lt=LATEST)]
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
# Event data is stored as JSON text by orjson, which refuses some of what JSON allows
# (integers beyond 64 bits, nesting past 255 levels): ingest checks it as it makes the text
# (lake.projection.event_data), once per event.
JsonObject = dict[str, Any]


class _Model(BaseModel):
    # Unknown fields are refused so that a misspelt field is reported instead of silently lost.
    model_config = ConfigDict(extra="forbid", frozen=True)


class Submission(_Model):
    """One user message folded into the turn."""

    text: str
    event_type: EventType
    batch: int = Field(ge=0, le=2**31 - 1)
    arrived_at: Instant


class ContextEvent(_Model):
    """A user context event (page opened, selection made, ...) that arrived with the turn."""

    kind: str = Field(min_length=1)
    at: Instant
    data: JsonObject = Field(default_factory=dict)


class Attachment(_Model):
    """A file the user attached; ``text`` is its extracted, searchable text when present."""

    name: str = Field(min_length=1)
    mime: str
    size: Count
    ref: str | None = None
    text: str | None = None


class Step(_Model):
    """A progress step reported by the adapter (tool start, tool result, ...)."""

    name: str = Field(min_length=1)
    status: StepStatus
    at: Instant
    detail: str | None = None


class HostedFile(_Model):
    """A file the assistant hosted into conversation storage.

    Exactly one of ``content_b64`` (the bytes, base64) or ``source_path`` (a path readable by the
    ingesting process, relative to the record's file) supplies the bytes.
    """

    path: str
    mime: str
    content_b64: str | None = None
    source_path: str | None = None
    description: str | None = None

    @field_validator("path")
    @classmethod
    def _path_inside_files(cls, value: str) -> str:
        if not value.startswith("files/") or len(value) <= len("files/"):
            raise ValueError("must be 'files/<relative path>'")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> HostedFile:
        if (self.content_b64 is None) == (self.source_path is None):
            raise ValueError("exactly one of content_b64 or source_path is required")
        return self

    def decoded_bytes(self) -> bytes | None:
        """The inline bytes, or None when the file comes from ``source_path``."""
        if self.content_b64 is None:
            return None
        try:
            return base64.b64decode(self.content_b64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise RecordError(f"hosted file {self.path}: content_b64 is not valid base64",
                              field="hosted_files.content_b64") from exc


class Completion(_Model):
    """The one final assistant answer of the turn.

    ``status`` says whether the assistant got to answer: a turn the user interrupted, or one
    that failed, is still recorded (its prompts and steps are what the user did) and may then
    have an empty ``text``. An empty text (whatever the status) makes no assistant search
    row. Not checked against ``text``: records written before the field existed stay valid.
    """

    text: str
    at: Instant
    # Left out of the canonical JSON when "completed", so records that never say it keep
    # the payload they had before the field existed.
    status: CompletionStatus = Field(default="completed", exclude_if=lambda s: s == "completed")


class Citation(_Model):
    """A source the answer cited."""

    title: str
    url: str
    snippet: str | None = None


class LiveEvent(_Model):
    """A recorded live event (chat.step, badges, panels) kept for replay."""

    type: str = Field(min_length=1)
    at: Instant
    data: JsonObject = Field(default_factory=dict)


class Usage(_Model):
    """Token and cost accounting of the turn."""

    tokens_in: Count
    tokens_out: Count
    cost_usd: float | None = Field(default=None, ge=0)
    duration_ms: Count | None = None


class Feedback(_Model):
    """The user's rating of the answer (for example 1 / -1, or 1–5 stars)."""

    rating: int = Field(ge=-10, le=10)
    comment: str | None = None


class TurnRecord(_Model):
    """One accepted turn: the reload source (TurnLog payload) and the source of its search rows."""

    schema_: Literal["turnlake.turn.v1"] = Field(alias="schema")
    tenant: Id
    app: Id
    agent: Id
    user_id: Id
    conversation_id: Id
    turn_id: Id
    writer: Writer
    started_at: Instant
    ended_at: Instant
    conversation_title: str | None = None
    submissions: list[Submission] = Field(min_length=1)
    context_events: list[ContextEvent] = Field(default_factory=list)
    attachments: list[Attachment] = Field(default_factory=list)
    steps: list[Step] = Field(default_factory=list)
    hosted_files: list[HostedFile] = Field(default_factory=list)
    completion: Completion
    summary: str | None = None
    anchors: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    citations: list[Citation] = Field(default_factory=list)
    events: list[LiveEvent] = Field(default_factory=list)
    usage: Usage | None = None
    feedback: Feedback | None = None
    ttl_days: int | None = Field(default=None, ge=1, le=36_500)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _times_in_order(self) -> TurnRecord:
        if self.ended_at < self.started_at:
            raise ValueError("ended_at is before started_at")
        return self

    @property
    def key(self) -> tuple[str, str, str]:
        """The turn's identity: (tenant, conversation_id, turn_id)."""
        return (self.tenant, self.conversation_id, self.turn_id)

    def to_json(self, *, without_hosted_bytes: bool = False) -> str:
        """The record as canonical JSON (field ``schema`` spelt as in the contract); with
        ``without_hosted_bytes``, its hosted files without ``content_b64`` and
        ``source_path`` (as a TurnLog payload stores them: refs replace the bytes)."""
        return self.to_json_bytes(without_hosted_bytes=without_hosted_bytes).decode()

    def to_json_bytes(self, *, without_hosted_bytes: bool = False) -> bytes:
        """:meth:`to_json`, UTF-8 encoded: what ingest needs, with neither decoding nor
        encoding again."""
        # What model_dump_json(by_alias=True, exclude_none=True) does, without its Python
        # wrapper: ingest serializes every accepted record once.
        exclude = _HOSTED_BYTES if without_hosted_bytes and self.hosted_files else None
        return self.__pydantic_serializer__.to_json(
            self, by_alias=True, exclude_none=True, exclude=exclude)


def parse_record(raw: str | bytes) -> TurnRecord:
    """Parse and validate one JSON record; raise RecordError naming the first bad field."""
    try:
        # TurnRecord.model_validate_json without its Python wrapper (ingest calls this per line).
        record: TurnRecord = TurnRecord.__pydantic_validator__.validate_json(raw)
        return record
    except ValidationError as exc:
        raise RecordError(describe_validation_error(exc),
                          field=_first_location(exc)) from None


def describe_validation_error(exc: ValidationError) -> str:
    """A one-line summary of a pydantic error that names each bad field and why."""
    parts = []
    for error in exc.errors()[:5]:
        location = ".".join(str(p) for p in error["loc"]) or "(record)"
        parts.append(f"{location}: {error['msg']}")
    more = exc.error_count() - 5
    if more > 0:
        parts.append(f"... and {more} more")
    return "; ".join(parts)


def _first_location(exc: ValidationError) -> str | None:
    errors = exc.errors()
    if not errors:
        return None
    return ".".join(str(p) for p in errors[0]["loc"]) or None


def json_schema() -> dict[str, Any]:
    """The JSON Schema of ``turnlake.turn.v1``, generated from the models."""
    schema = TurnRecord.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://turnlake.dev/schema/turn.v1.schema.json"
    schema["title"] = SCHEMA_ID
    return schema
