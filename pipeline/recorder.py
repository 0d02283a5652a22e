"""The turn recorder: what a host calls at the turn boundary to record a turn.

    recorder = Recorder(spool=Path("spool"))            # or Recorder(settings=...) for the lake
                                                        # or Recorder(url=..., key=...)
    with recorder.begin("acme", "support-desk", "react-agent", "u-ana", "c-42", "t-7") as turn:
        turn.submit("the forecast is off by an hour")
        turn.step("run_python", "started")
        ref = turn.host_file("files/forecast.csv", b"month,hours\\n3,12\\n", mime="text/csv")
        turn.complete(f"Fixed the timezone; see {ref}.")

Completing writes exactly one ``turnlake.turn.v1`` record: into the spool folder atomically
(temp file, fsync, rename; ``turnlake ingest SPOOL`` drains it) or straight into the lake,
through one :class:`pipeline.live.LiveWriter` kept for the recorder's life (store and model
stay open; the turn is embedded and searchable when ``complete`` returns). A turn
left without ``complete`` is abandoned and writes nothing, so a host crash loses at most the
open turn. Recording the same turn twice writes the same file name, and ingest keeps one copy.

``Recorder(url=..., key=...)`` sends each completed turn to a turnlake server instead
(``turnlake.Client``); while the server cannot be reached, turns wait in a local outbox
folder and are sent, oldest first, with the next turn or on :meth:`Recorder.flush`
(``turnlake.outbox``). This mode imports nothing heavy: a host needs only ``pip install
turnlake``.
"""

from __future__ import annotations

import base64
import mimetypes
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from lake.errors import RecordError, TurnlakeError
from lake.records import TurnRecord
from lake.refs import file_ref, normalize_relative_path, validate_id

if TYPE_CHECKING:  # the lake's side; a server-mode host has none of it installed
    from lake.embedding.base import Embedder
    from lake.settings import Settings
    from pipeline.live import LiveWriter
    from turnlake.outbox import Flushed, ServerSink

EventType = Literal["prompt", "followup", "steer"]
StepStatus = Literal["started", "completed", "failed"]


@dataclass(frozen=True)
class TurnIdentity:
    """Who and where a recorded turn belongs to (what :meth:`Recorder.begin` takes)."""

    tenant: str
    app: str
    agent: str
    user_id: str
    conversation_id: str
    turn_id: str
    title: str | None = None


class RecorderError(TurnlakeError):
    """The recorder was used out of order (after completion, twice, ...)."""


class Recorder:
    """Creates turn recordings; writes completed turns to a spool folder, to the lake, or to
    a turnlake server (``url`` and ``key``; ``outbox`` is where turns wait while the server
    is away, default ``~/.turnlake/outbox``)."""

    def __init__(self, *, spool: Path | None = None, settings: Settings | None = None,
                 url: str | None = None, key: str | None = None, outbox: Path | None = None,
                 max_file_bytes: int | None = None, embedder: Embedder | None = None,
                 embed: bool = True) -> None:
        if sum(x is not None for x in (spool, settings, url)) != 1:
            raise RecorderError("give exactly one of spool= (a folder), settings= (the lake) "
                                "or url= (a turnlake server)")
        self.spool = Path(spool) if spool is not None else None
        self.settings = settings
        self._embedder = embedder
        self._embed = embed
        self._writer: LiveWriter | None = None  # opened on the first turn, then kept
        self._server: ServerSink | None = None
        if url is not None:
            from turnlake.outbox import ServerSink

            self._server = ServerSink(url, key, outbox)
        self.max_file_bytes = max_file_bytes or (
            settings.max_hosted_file_bytes if settings else 50 * 1024 * 1024)
        if self.spool is not None:
            self.spool.mkdir(parents=True, exist_ok=True)

    def begin(self, tenant: str, app: str, agent: str, user_id: str, conversation_id: str,
              turn_id: str, *, title: str | None = None, ttl_days: int | None = None,
              at: datetime | None = None) -> TurnRecording:
        """Open a turn. Ids are validated now, so a bad id fails before any work is done."""
        ids = {"tenant": tenant, "app": app, "agent": agent, "user_id": user_id,
               "conversation_id": conversation_id, "turn_id": turn_id}
        for name, value in ids.items():
            validate_id(value, name)
        return TurnRecording(self, ids, title=title, ttl_days=ttl_days, started_at=at or _now())

    def write(self, record: TurnRecord) -> Path | None:
        """Persist one completed record; returns the spool file (None when written to the lake
        or sent to the server). A server that refuses the turn raises
        ``turnlake.errors.TurnRejected``; one that cannot be reached leaves it in the
        outbox."""
        if self._server is not None:
            self._server.write(record)
            return None
        if self.spool is not None:
            name = f"{record.tenant}.{record.conversation_id}.{record.turn_id}.jsonl"
            final = self.spool / name
            tmp = self.spool / f".{name}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(record.to_json() + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            return final
        assert self.settings is not None
        if self._writer is None:
            from pipeline.live import LiveWriter

            self._writer = LiveWriter(self.settings, self._embedder, embed=self._embed)
        report = self._writer.record([record]).ingest
        if report.quarantined:
            raise RecordError(report.quarantined[0].reason)
        return None


    def flush(self) -> Flushed:
        """Server mode: send the turns waiting in the outbox now."""
        if self._server is None:
            raise RecorderError("flush() is for a recorder with url= (a turnlake server)")
        return self._server.flush()

    def close(self) -> None:
        """Release the server connection (server mode)."""
        if self._server is not None:
            self._server.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TurnRecording:
    """One open turn. Fold submissions and activity in as they happen, then ``complete``."""

    def __init__(self, recorder: Recorder, ids: dict[str, str], *, title: str | None,
                 ttl_days: int | None, started_at: datetime) -> None:
        self._recorder = recorder
        self._ids = ids
        self._title = title
        self._ttl_days = ttl_days
        self._started_at = started_at
        self._submissions: list[dict[str, Any]] = []
        self._context: list[dict[str, Any]] = []
        self._attachments: list[dict[str, Any]] = []
        self._steps: list[dict[str, Any]] = []
        self._events: list[dict[str, Any]] = []
        self._files: list[dict[str, Any]] = []
        self._citations: list[dict[str, Any]] = []
        self._summary: str | None = None
        self._anchors: list[str] = []
        self._notes: list[str] = []
        self._usage: dict[str, Any] | None = None
        self._feedback: dict[str, Any] | None = None
        self.completed: TurnRecord | None = None

    # -- what arrives during the turn -----------------------------------------------------

    def submit(self, text: str, event_type: EventType | None = None, *, batch: int | None = None,
               at: datetime | None = None) -> None:
        """Fold a user message in (the first is the prompt, later ones follow-ups by default)."""
        self._open()
        kind = event_type or ("prompt" if not self._submissions else "followup")
        self._submissions.append({"text": text, "event_type": kind,
                                  "batch": len(self._submissions) if batch is None else batch,
                                  "arrived_at": _iso(at)})

    def context(self, kind: str, data: dict[str, Any] | None = None, *,
                at: datetime | None = None) -> None:
        """Record a user context event."""
        self._open()
        self._context.append({"kind": kind, "at": _iso(at), "data": data or {}})

    def attach(self, name: str, mime: str, size: int, *, ref: str | None = None,
               text: str | None = None) -> None:
        """Record an uploaded attachment (``text``: extracted, searchable)."""
        self._open()
        self._attachments.append({"name": name, "mime": mime, "size": size, "ref": ref,
                                  "text": text})

    def step(self, name: str, status: StepStatus, *, detail: str | None = None,
             at: datetime | None = None) -> None:
        """Report a progress step (replayed as a chat.step event)."""
        self._open()
        self._steps.append({"name": name, "status": status, "at": _iso(at), "detail": detail})

    def event(self, type_: str, data: dict[str, Any] | None = None, *,
              at: datetime | None = None) -> None:
        """Record a live event shown to the user (badges, panels)."""
        self._open()
        self._events.append({"type": type_, "at": _iso(at), "data": data or {}})

    def host_file(self, path: str, data: bytes | None = None, *, source: Path | None = None,
                  mime: str | None = None, description: str | None = None) -> str:
        """Host a produced file under ``files/`` and return its ``conv:fi:`` ref.

        The path must stay inside ``files/`` (no traversal); the size is limited."""
        self._open()
        relative = path[len("files/"):] if path.startswith("files/") else path
        relative = normalize_relative_path(relative)
        if (data is None) == (source is None):
            raise RecorderError("host_file needs exactly one of data= or source=")
        content = data if data is not None else Path(source or "").read_bytes()
        if len(content) > self._recorder.max_file_bytes:
            raise RecordError(f"hosted file files/{relative} is {len(content)} bytes, over the "
                              f"{self._recorder.max_file_bytes}-byte limit")
        if any(f["path"] == f"files/{relative}" for f in self._files):
            raise RecorderError(f"files/{relative} is already hosted in this turn")
        self._files.append({"path": f"files/{relative}",
                            "mime": mime or mimetypes.guess_type(relative)[0]
                            or "application/octet-stream",
                            "content_b64": base64.b64encode(content).decode(),
                            "description": description})
        return file_ref(self._ids["conversation_id"], self._ids["turn_id"], relative)

    def cite(self, title: str, url: str, snippet: str | None = None) -> None:
        """Record a citation of the answer."""
        self._open()
        self._citations.append({"title": title, "url": url, "snippet": snippet})

    def summarize(self, summary: str) -> None:
        """Rich writers: the working summary (goal, outcome, facts, refs)."""
        self._open()
        self._summary = summary

    def anchor(self, phrase: str) -> None:
        """Rich writers: a literal phrase worth finding again."""
        self._open()
        self._anchors.append(phrase)

    def note(self, text: str) -> None:
        """Rich writers: a note deliberately exposed to the index."""
        self._open()
        self._notes.append(text)

    def usage(self, tokens_in: int, tokens_out: int, *, cost_usd: float | None = None,
              duration_ms: int | None = None) -> None:
        """Token and cost accounting."""
        self._usage = {"tokens_in": tokens_in, "tokens_out": tokens_out,
                       "cost_usd": cost_usd, "duration_ms": duration_ms}

    def feedback(self, rating: int, comment: str | None = None) -> None:
        """The user's rating."""
        self._feedback = {"rating": rating, "comment": comment}

    # -- the end of the turn --------------------------------------------------------------

    def complete(self, text: str, *, at: datetime | None = None) -> TurnRecord:
        """Write the turn's one record with the final answer; returns it."""
        self._open()
        if not self._submissions:
            raise RecorderError("a turn needs at least one user submission before complete()")
        ended = at or _now()
        rich = bool(self._summary or self._anchors or self._notes)
        raw: dict[str, Any] = {
            "schema": "turnlake.turn.v1", **self._ids, "writer": "rich" if rich else "minimal",
            "started_at": self._started_at.isoformat(), "ended_at": ended.isoformat(),
            "conversation_title": self._title, "submissions": self._submissions,
            "context_events": self._context,
            "attachments": [_drop_none(a) for a in self._attachments],
            "steps": [_drop_none(s) for s in self._steps], "events": self._events,
            "hosted_files": [_drop_none(f) for f in self._files],
            "completion": {"text": text, "at": ended.isoformat()},
            "summary": self._summary, "anchors": self._anchors, "notes": self._notes,
            "citations": [_drop_none(c) for c in self._citations],
            "usage": _drop_none(self._usage) if self._usage else None,
            "feedback": _drop_none(self._feedback) if self._feedback else None,
            "ttl_days": self._ttl_days,
        }
        record = TurnRecord.model_validate(_drop_none(raw))
        self._recorder.write(record)
        self.completed = record
        return record

    def __enter__(self) -> TurnRecording:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # Leaving without complete() abandons the turn: nothing is written.
        return None

    def _open(self) -> None:
        if self.completed is not None:
            raise RecorderError(f"turn {self._ids['conversation_id']}/{self._ids['turn_id']} "
                                "is already completed")


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(at: datetime | None) -> str:
    moment = at or _now()
    if moment.tzinfo is None:
        raise RecordError(f"time {moment!r} has no offset; pass an aware datetime")
    return moment.isoformat()


def _drop_none(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if v is not None}
