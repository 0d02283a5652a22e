"""Known-turn materialization and ref resolution: rebuild a turn from its TurnLog, and hand out
hosted file bytes to authorized principals while the object is retained."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pyarrow.dataset as ds

from lake.addresses import (
    STEPS,
    edition_of,
    event_address,
    record_address,
    row_address,
    step_address,
)
from lake.deletion.policy import redact_payload
from lake.errors import AccessDenied, QueryError, RefError, RefExpired, RefNotFound
from lake.filestore import FileStore
from lake.mentions import Mention
from lake.records import Attachment, Citation, Feedback, Step, Submission, Usage
from lake.refs import parse_ref, validate_id
from lake.search.access import Principal
from lake.store import LakeStore
from lake.tables import ROLES, Table


@dataclass(frozen=True)
class FileCard:
    """A hosted file as shown on a turn: its ref, name, type and size."""

    ref: str
    name: str
    path: str
    mime: str
    size: int
    sha256: str
    description: str | None
    expires_at: datetime


@dataclass(frozen=True)
class RecordedEvent:
    """A recorded event of a turn (context event, step or live event), in replay order."""

    seq: int
    source: str
    type: str
    at: str
    data: Any  # the event's JSON value, as recorded

    @property
    def data_json(self) -> str:
        """The data as compact JSON (for the table of events without a renderer)."""
        return json.dumps(self.data, ensure_ascii=False, sort_keys=True)

    def field(self, name: str) -> str | None:
        """A text field of an object ``data`` (None when absent or not text)."""
        value = self.data.get(name) if isinstance(self.data, dict) else None
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class TurnParts:
    """A materialized turn's JSON parts, typed: the record model's own types (lake.records)
    for what the record holds, :class:`RecordedEvent` for its events in replay order."""

    submissions: list[Submission]
    attachments: list[Attachment]
    steps: list[Step]
    citations: list[Citation]
    usage: Usage | None
    feedback: Feedback | None
    events: list[RecordedEvent]


@dataclass(frozen=True)
class TurnAddresses:
    """The canonical addresses of a turn's objects (lake.addresses), each list aligned with
    the materialized turn's list of the same name; ``rows``: its live search rows'."""

    record: str
    completion: str
    submissions: list[str]
    attachments: list[str]
    citations: list[str]
    steps: list[str]
    events: list[str]
    rows: list[str]


@dataclass(frozen=True)
class MaterializedTurn:
    """A whole turn rebuilt from its TurnLog, with file cards and recorded events."""

    tenant: str
    user_id: str
    conversation_id: str
    turn_id: str
    app: str
    agent: str
    writer: str
    title: str | None
    ordinal: int
    started_at: datetime
    ended_at: datetime
    submissions: list[dict[str, Any]]
    completion: dict[str, Any]
    attachments: list[dict[str, Any]]
    files: list[FileCard]
    steps: list[dict[str, Any]]
    citations: list[dict[str, Any]]
    events: list[dict[str, Any]]
    usage: dict[str, Any] | None
    feedback: dict[str, Any] | None
    summary: str | None = None
    anchors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # "completed", "interrupted" or "failed" (completion.status; a record that does not say
    # is completed): replay shows an interrupted badge from it.
    completion_status: str = "completed"
    # Which recording of the turn this is (lake.addresses.edition_of its batch).
    edition: str | None = None
    addresses: TurnAddresses | None = None
    # The conv:* refs its completion and summary name, and what each leads to.
    mentions: list[Mention] = field(default_factory=list)

    def parts(self) -> TurnParts:
        """The turn's recorded parts as the record model's own types (what replay renders);
        steps in time order, since adapters may report them out of order."""
        return TurnParts(
            submissions=[Submission.model_validate(s) for s in self.submissions],
            attachments=[Attachment.model_validate(a) for a in self.attachments],
            steps=sorted((Step.model_validate(s) for s in self.steps), key=lambda s: s.at),
            citations=[Citation.model_validate(c) for c in self.citations],
            usage=None if self.usage is None else Usage.model_validate(self.usage),
            feedback=None if self.feedback is None else Feedback.model_validate(self.feedback),
            events=[RecordedEvent(int(e["seq"]), str(e["source"]), str(e["type"]),
                                  str(e["at"]), e["data"]) for e in self.events])

    def to_json(self) -> dict[str, Any]:
        """JSON-ready fields."""
        out = {k: v for k, v in self.__dict__.items()
               if k not in ("files", "addresses", "mentions")}
        out["addresses"] = None if self.addresses is None else self.addresses.__dict__
        out["mentions"] = [{k: v for k, v in m.__dict__.items() if v is not None}
                           for m in self.mentions]
        out["started_at"] = self.started_at.isoformat()
        out["ended_at"] = self.ended_at.isoformat()
        out["files"] = [{**f.__dict__, "expires_at": f.expires_at.isoformat()}
                        for f in self.files]
        return out


class TurnMaterializer:
    """Rebuilds known turns and resolves conv:fi: refs, under a principal's access rules."""

    def __init__(self, store: LakeStore) -> None:
        self._store = store
        self._files = FileStore(store.root)

    @property
    def store(self) -> LakeStore:
        """The lake this materializer reads."""
        return self._store

    def turn(self, principal: Principal, conversation_id: str, turn_id: str, *,
             as_of: datetime | None = None, mentions: bool = True) -> MaterializedTurn:
        """The whole turn, with its objects' addresses and (``mentions``) the refs its text
        names. An end user who may not read it gets AccessDenied, alike whether it is another
        user's or does not exist (or expired); an analyst gets QueryError for a turn that
        does not exist."""
        validate_id(conversation_id, "conversation_id")
        validate_id(turn_id, "turn_id")
        now = as_of or datetime.now(UTC)
        key = ((ds.field("tenant") == principal.tenant)
               & (ds.field("conversation_id") == conversation_id))
        logs = self._store.read_sparse(Table.TURN_LOGS,
                                       filter=key & (ds.field("expires_at") > now),
                                       columns=["turn_id", "user_id", "started_at",
                                                "batch_id", "payload"])
        rows = logs.to_pylist()
        match = [r for r in rows if r["turn_id"] == turn_id]
        if not principal.analyst and (not match or match[0]["user_id"] != principal.user_id):
            # one answer for another user's turn and for none: the difference would leak
            raise AccessDenied(f"{principal.describe()} may not read turn "
                               f"{conversation_id}/{turn_id}")
        if not match:
            raise QueryError(f"no live turn {conversation_id}/{turn_id} in tenant "
                             f"{principal.tenant}")
        row = match[0]
        ordinal = 1 + sum(1 for r in rows if (r["started_at"], r["turn_id"])
                          < (row["started_at"], turn_id))
        turn_filter = key & (ds.field("turn_id") == turn_id)
        content = self._store.read(Table.CONTENT_ROWS, filter=turn_filter,
                                   columns=["role", "seq", "expires_at", "batch_id"]).to_pylist()
        payload = json.loads(_live_payload(row["payload"], content, now))
        files = self._file_cards(turn_filter, now)
        events = self._store.read(Table.EVENTS, filter=turn_filter).sort_by("seq").to_pylist()
        edition = edition_of(row["batch_id"])
        live_rows = [(r["role"], r["seq"]) for r in content
                     if r["expires_at"] > now and r["batch_id"] == row["batch_id"]]
        addresses = _addresses(conversation_id, turn_id, edition, payload,
                               [e["seq"] for e in events],
                               sorted(live_rows, key=lambda r: (ROLES.index(r[0]), r[1])))
        shown = MaterializedTurn(
            tenant=principal.tenant, user_id=row["user_id"], conversation_id=conversation_id,
            turn_id=turn_id, app=payload["app"], agent=payload["agent"],
            writer=payload["writer"], title=payload.get("conversation_title"),
            ordinal=ordinal,
            started_at=datetime.fromisoformat(payload["started_at"]),
            ended_at=datetime.fromisoformat(payload["ended_at"]),
            submissions=payload["submissions"], completion=payload["completion"],
            attachments=payload.get("attachments", []), files=files,
            steps=payload.get("steps", []), citations=payload.get("citations", []),
            events=[{"seq": e["seq"], "source": e["source"], "type": e["type"],
                     "at": e["at"].isoformat(), "data": json.loads(e["data"])}
                    for e in events],
            usage=payload.get("usage"), feedback=payload.get("feedback"),
            summary=payload.get("summary"), anchors=payload.get("anchors", []),
            notes=payload.get("notes", []),
            completion_status=payload["completion"].get("status", "completed"),
            edition=edition, addresses=addresses)
        if not mentions:
            return shown
        from lake.resolver import RefResolver  # the resolver materializes records: no cycle

        found = RefResolver(self).mentions(principal, shown, as_of=now)
        return replace(shown, mentions=found)

    def resolve(self, principal: Principal, ref: str, *,
                as_of: datetime | None = None) -> tuple[FileCard, bytes]:
        """The bytes behind a conv:fi: ref. Raises RefError (malformed), RefNotFound (no such
        object), RefExpired (past its expires_at) or AccessDenied (not this principal's)."""
        row = self.file_row(principal, ref, as_of=as_of)
        return card_of(row), self._files.get(row["storage_key"])

    def file_row(self, principal: Principal, ref: str, *,
                 as_of: datetime | None = None) -> dict[str, Any]:
        """The files-table row of a conv:fi: ref, with the checks and errors of
        :meth:`resolve`, without reading its bytes."""
        parsed = parse_ref(ref)
        if not parsed.is_file:
            raise RefError(f"{ref} is a conv:{parsed.namespace}: ref; only conv:fi: refs "
                           "resolve to bytes")
        now = as_of or datetime.now(UTC)
        rows = self._store.read(
            Table.FILES, filter=(ds.field("tenant") == principal.tenant)
            & (ds.field("conversation_id") == parsed.conversation_id)
            & (ds.field("turn_id") == parsed.turn_id) & (ds.field("ref") == str(parsed)),
        ).to_pylist()
        live_turn = self._store.read(
            Table.TURN_LOGS, columns=["user_id", "expires_at"],
            filter=(ds.field("tenant") == principal.tenant)
            & (ds.field("conversation_id") == parsed.conversation_id)
            & (ds.field("turn_id") == parsed.turn_id)).to_pylist()
        if not rows or not live_turn:
            raise RefNotFound(f"{ref} names no hosted file in tenant {principal.tenant}")
        row: dict[str, Any] = rows[0]
        if not principal.analyst and row["user_id"] != principal.user_id:
            raise AccessDenied(f"{principal.describe()} may not read {ref}")
        if row["expires_at"] <= now or live_turn[0]["expires_at"] <= now:
            raise RefExpired(f"{ref} expired at {min(row['expires_at'], live_turn[0]['expires_at']):%Y-%m-%d %H:%M} UTC")  # noqa: E501
        return row

    def _file_cards(self, turn_filter: ds.Expression, now: datetime) -> list[FileCard]:
        rows = self._store.read(Table.FILES, filter=turn_filter & (ds.field("expires_at") > now))
        return [card_of(r) for r in rows.sort_by("path").to_pylist()]


def _live_payload(payload: str, content: list[dict[str, Any]], now: datetime) -> str:
    """The payload without the texts of roles whose rows (``content``) expired before their
    turn."""
    roles = {r["role"] for r in content if r["expires_at"] <= now}
    return redact_payload(payload, roles) if roles else payload


def _addresses(conversation_id: str, turn_id: str, edition: str, payload: dict[str, Any],
               event_seqs: list[int], rows: list[tuple[str, int]]) -> TurnAddresses:
    """The addresses of a turn's objects in ``edition``."""
    def listed(part: str) -> list[str]:
        return [record_address(conversation_id, turn_id, edition, part, i)
                for i in range(len(payload.get(part, [])))]

    return TurnAddresses(
        record=record_address(conversation_id, turn_id, edition),
        completion=record_address(conversation_id, turn_id, edition, "completion"),
        submissions=listed("submissions"), attachments=listed("attachments"),
        citations=listed("citations"),
        steps=[step_address(conversation_id, turn_id, i, edition)
               for i in range(len(payload.get(STEPS, [])))],
        events=[event_address(conversation_id, turn_id, seq, edition) for seq in event_seqs],
        rows=[row_address(conversation_id, turn_id, role, seq, edition)
              for role, seq in rows])


def card_of(row: dict[str, Any]) -> FileCard:
    """The file card of a files-table row."""
    return FileCard(ref=row["ref"], name=row["path"].rsplit("/", 1)[-1], path=row["path"],
                    mime=row["mime"], size=row["size"], sha256=row["sha256"],
                    description=row["description"], expires_at=row["expires_at"])
