"""Import GitHub Copilot CLI sessions (``~/.copilot/session-state/<id>/events.jsonl``, or the
older ``~/.copilot/session-state/<id>.jsonl``).

Each line is one event ``{"type", "id", "timestamp", "parentId", "data"}``; a file is one
session, one conversation (``session.start``'s ``sessionId``, else the folder or file name).
A ``user.message`` opens a turn (its id is the turn's); what the CLI sent the model in its
place (``transformedContent``: the prompt with the date, reminders and file contents added) is
a context event, and a message the CLI wrote itself (``source`` other than the user, or a text
that is one tag from start to end) is context, not the user's words. ``assistant.message``
contents are the answer, joined in order; ``tool.execution_start`` / ``tool.execution_complete``
(paired by ``toolCallId``) are steps, and so is reasoning; ``abort`` marks the turn interrupted,
``session.error`` failed. Session start (cwd, git root, branch, repository), model changes,
truncations, compactions and info events are context events.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from lake.records import Attachment, ContextEvent, StepStatus, TurnRecord, Usage
from pipeline.importers.agent_files import (
    TurnStart,
    find_files,
    input_summary,
    read_events,
    text_of,
    time_of,
)
from pipeline.importers.common import Identity, ImportStream, TurnDraft, stable_id
from pipeline.importers.text import compact_json, one_line

AGENT = "copilot-cli"
EVENTS_FILE = "events.jsonl"
_WHOLE_TAG = re.compile(r"^<([a-z][a-z0-9_-]*)>.*</\1>$", re.DOTALL)
_USER_SOURCES = (None, "user")
# Session events kept as context of the turn they happen in (or the next one).
_CONTEXT_EVENTS = {"session.info": "info", "session.model_change": "model_change",
                   "session.truncation": "truncation",
                   "session.compaction_complete": "compaction", "session.error": "error"}
_BOOKKEEPING = ("assistant.turn_start", "assistant.turn_end", "session.resume",
                "session.compaction_start", "assistant.message_delta",
                "assistant.reasoning_delta", "session.usage_info", "tool.execution_partial_result",
                "hook.start", "hook.end")


def is_session(path: Path) -> bool:
    """Whether a file found in a folder is a Copilot CLI session's event log."""
    return path.name == EVENTS_FILE or (path.suffix == ".jsonl"
                                        and path.parent.name == "session-state")


def iter_copilot_cli(paths: Sequence[Path], *, tenant: str, user_id: str, app: str = AGENT,
                     agent: str = AGENT) -> ImportStream:
    """Turn records from Copilot CLI session event logs, or folders searched for them. Raises
    RecordError at once when a path does not exist or an identity part is not a valid id."""
    identity = Identity(tenant=tenant, user_id=user_id, app=app, agent=agent)
    files = find_files(paths, is_session, "Copilot CLI session")

    def produce(stream: ImportStream) -> Iterator[TurnRecord]:
        for path in files:
            yield from _SessionImport(path, identity, stream).records()

    return ImportStream(produce)


class _SessionImport:
    def __init__(self, path: Path, identity: Identity, stream: ImportStream) -> None:
        self._path = path
        self._source = str(path)
        self._identity = identity
        self._stream = stream
        self._session_id = path.parent.name if path.name == EVENTS_FILE else path.stem
        self._drafts: list[TurnDraft] = []
        self._replied = False
        self._waiting: list[ContextEvent] = []
        self._tools: dict[str, str] = {}
        self._tokens: dict[str, tuple[int, int]] = {}

    def records(self) -> Iterator[TurnRecord]:
        for line, _offset, _size, event in read_events(self._path, TurnStart(0, 1),
                                                        self._stream):
            at = time_of(event.get("timestamp"))
            data = event.get("data")
            if at is None or not isinstance(event.get("type"), str) or not isinstance(data, dict):
                self._stream.problem(self._source, f"line {line}", "event has no type, time or "
                                     "data object", compact_json(event, 300))
                continue
            self._on_event(event, data, at, line)
        if self._waiting:
            self._stream.skip("context event before a turn not yet written", len(self._waiting))
        title = self._drafts[0].submissions[0].text if self._drafts else None
        conversation = stable_id(self._session_id)
        for draft in self._drafts:
            if draft.turn_id in self._tokens:
                tokens_in, tokens_out = self._tokens[draft.turn_id]
                draft.usage = Usage(tokens_in=tokens_in, tokens_out=tokens_out)
            record = draft.finish(self._stream, self._identity, conversation,
                                  one_line(title) if title else None, self._source,
                                  f"turn={draft.turn_id}")
            if record is not None:
                yield record

    def _on_event(self, event: dict[str, Any], data: dict[str, Any], at: datetime,
                  line: int) -> None:
        kind = event["type"]
        draft = self._drafts[-1] if self._drafts else None
        if kind == "session.start":
            self._on_start(data, at)
        elif kind == "user.message":
            self._on_user(event, data, at, line)
        elif kind in _CONTEXT_EVENTS:
            message = data.get("message")
            details = {k: v for k, v in data.items() if isinstance(v, str | int | float)}
            if isinstance(message, str):
                details["message"] = text_of(message)
            self._context(_CONTEXT_EVENTS[kind], at, details)
            if kind == "session.error" and draft is not None and draft.completion is None \
                    and draft.unfinished is None:
                draft.unfinished = "failed"
        elif kind in _BOOKKEEPING:
            self._stream.skip(f"{kind} event")
        elif draft is None:
            self._stream.skip(f"{kind} event before any prompt")
        else:
            self._replied = True
            self._on_assistant(draft, kind, data, at)

    def _on_start(self, data: dict[str, Any], at: datetime) -> None:
        if isinstance(data.get("sessionId"), str) and data["sessionId"]:
            self._session_id = data["sessionId"]
        context = data.get("context") if isinstance(data.get("context"), dict) else {}
        assert isinstance(context, dict)
        details = {k: v for k, v in context.items() if isinstance(v, str) and v}
        for key in ("copilotVersion", "producer"):
            if isinstance(data.get(key), str):
                details[key] = data[key]
        self._waiting.append(ContextEvent(kind="session", at=at, data=details))

    def _context(self, kind: str, at: datetime, data: dict[str, Any]) -> None:
        event = ContextEvent(kind=kind, at=at, data=data)
        if not self._drafts:
            self._waiting.append(event)
            return
        self._stream.count(f"context event: {kind}")
        self._drafts[-1].context_events.append(event)

    def _on_user(self, event: dict[str, Any], data: dict[str, Any], at: datetime,
                 line: int) -> None:
        content = data.get("content")
        text = content if isinstance(content, str) else ""
        if data.get("source") not in _USER_SOURCES or _WHOLE_TAG.match(text.strip()):
            self._context("harness_message", at, {"text": text_of(text), **(
                {"source": data["source"]} if isinstance(data.get("source"), str) else {})})
            return
        files = [Attachment(name=str(a.get("displayName") or a.get("path") or
                                     f"attachment-{n + 1}").rsplit("/", 1)[-1] or "attachment",
                            mime="application/octet-stream", size=0)
                 for n, a in enumerate(data.get("attachments") or []) if isinstance(a, dict)]
        if not text.strip() and not files:
            self._stream.skip("empty user message")
            return
        draft = self._drafts[-1] if self._drafts else None
        if draft is None or self._replied:
            event_id = event.get("id")
            draft = TurnDraft(stable_id(event_id if isinstance(event_id, str) and event_id
                                        else f"{self._session_id}:{line}"))
            for waiting in self._waiting:
                self._stream.count(f"context event: {waiting.kind}")
            draft.context_events.extend(self._waiting)
            self._waiting = []
            self._drafts.append(draft)
            self._replied = False
        transformed = data.get("transformedContent")
        if isinstance(transformed, str) and transformed.strip() != text.strip():
            self._stream.count("context event: transformed_prompt")
            draft.context_events.append(ContextEvent(kind="transformed_prompt", at=at,
                                                     data={"text": text_of(transformed)}))
        draft.add_user_text(text, at)
        draft.attachments.extend(files)

    def _on_assistant(self, draft: TurnDraft, kind: str, data: dict[str, Any],
                      at: datetime) -> None:
        if kind == "assistant.message":
            content = data.get("content")
            if isinstance(content, str) and content.strip() and draft.add_answer(content, at):
                self._stream.count("assistant message joined to the answer")
            reasoning = data.get("reasoningText")
            if isinstance(reasoning, str) and reasoning.strip():
                draft.add_step("reasoning", "completed", at, reasoning)
            requests = data.get("toolRequests")
            if isinstance(requests, list) and requests:
                self._stream.skip("tool request (its execution events are the steps)",
                                  len(requests))
        elif kind == "assistant.reasoning":
            content = data.get("content")
            if isinstance(content, str) and content.strip():
                draft.add_step("reasoning", "completed", at, content)
        elif kind == "tool.execution_start":
            name = str(data.get("toolName") or "tool")
            self._tools[str(data.get("toolCallId"))] = name
            draft.add_step(name, "started", at, input_summary(name, data.get("arguments")))
        elif kind == "tool.execution_complete":
            name = self._tools.get(str(data.get("toolCallId")), "tool")
            result = data.get("result")
            text = ""
            if isinstance(result, dict):
                text = str(result.get("content") or result.get("detailedContent") or "")
            elif isinstance(data.get("error"), dict | str):
                text = compact_json(data["error"])
            status: StepStatus = "completed" if data.get("success") is not False else "failed"
            draft.add_step(name, status, at, text)
        elif kind == "abort":
            draft.unfinished = "interrupted"
            draft.touch(at)
            self._stream.count("aborted turn")
        elif kind == "assistant.usage":
            before = self._tokens.get(draft.turn_id, (0, 0))
            self._tokens[draft.turn_id] = (before[0] + _count(data.get("inputTokens")),
                                           before[1] + _count(data.get("outputTokens")))
        else:
            self._stream.skip(f"{kind} event")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
