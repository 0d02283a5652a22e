"""Import Gemini CLI sessions (``~/.gemini/tmp/<project>/chats/session-*.json`` or ``.jsonl``).

A session file is one conversation (its ``sessionId``). Two containers hold the same messages:
one JSON object (``sessionId``, ``startTime``, ``messages``, ...) and the JSONL recording (a
metadata line, one line per message write, ``{"$set": ...}`` metadata updates and
``{"$rewindTo": id}`` rewinds). In the recording a message id written again replaces its earlier
version where it stood, and a rewind drops the message it names and everything after it.

A ``user`` message opens a turn; its words are what the user typed (``displayContent`` when the
CLI expanded a slash command or ``@file`` into a longer prompt, which is kept as a context
event); the "Please continue." the CLI sends itself when the model stopped mid-task is context,
not a new request. ``gemini`` messages are the answer (joined in order); their ``thoughts`` are
a reasoning step, never the answer; their ``toolCalls`` (results inline) are steps; ``tokens``
add up to the turn's usage. ``info`` messages about cancelled requests mark the turn
interrupted; other ``info``, ``warning`` and ``error`` messages are context events. ``logs.json``
beside the chats only repeats the prompts and is skipped, as are subagent sessions.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

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

AGENT = "gemini-cli"
LOGS_FILE = "logs.json"
# What Gemini CLI sends as the user when its next-speaker check says the model should go on.
_CONTINUATIONS = ("Please continue.", "System: Please continue.")
_CANCELLED = ("Request cancelled.", "Request cancelled")
_FAILED_STATUSES = ("error", "cancelled")


def is_session(path: Path) -> bool:
    """Whether a file found in a folder is a Gemini CLI session (or its logs.json)."""
    return (path.name.startswith("session-") and path.suffix in (".json", ".jsonl")) \
        or path.name == LOGS_FILE


def iter_gemini_cli(paths: Sequence[Path], *, tenant: str, user_id: str, app: str = AGENT,
                    agent: str = AGENT) -> ImportStream:
    """Turn records from Gemini CLI session files (``.json`` or ``.jsonl``), or folders searched
    for them. Raises RecordError at once when a path does not exist or an identity part is not
    a valid id; problems inside the files are reported on the stream."""
    identity = Identity(tenant=tenant, user_id=user_id, app=app, agent=agent)
    files = find_files(paths, is_session, "Gemini CLI session")

    def produce(stream: ImportStream) -> Iterator[TurnRecord]:
        for path in files:
            if path.name == LOGS_FILE:
                stream.skip("logs.json (it repeats the prompts the sessions hold)")
                continue
            if path.suffix == ".json" and path.with_suffix(".jsonl").is_file():
                # Gemini CLI moves a resumed .json session into a .jsonl recording beside it.
                stream.skip("session .json migrated to the .jsonl beside it")
                continue
            session = _read_session(path, stream)
            if session is not None:
                yield from _SessionImport(path, identity, stream, session).records()

    return ImportStream(produce)


@dataclass
class _Session:
    session_id: str
    messages: list[dict[str, Any]]
    summary: str | None
    kind: str | None


def _read_session(path: Path, stream: ImportStream) -> _Session | None:
    source = str(path)
    if path.suffix == ".json":
        try:
            data = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            stream.problem(source, "file", f"session file is not valid JSON: {exc}",
                           path.read_bytes()[:300])
            return None
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            stream.problem(source, "file", "session file is not an object with messages",
                           compact_json(data, 300))
            return None
        raw = [(f"messages[{n}]", m) for n, m in enumerate(data["messages"])]
        metadata = data
    else:
        metadata, raw = _replay(path, stream)
    session_id = metadata.get("sessionId")
    if not isinstance(session_id, str) or not session_id:
        stream.problem(source, "file", "session has no sessionId", compact_json(metadata, 300))
        return None
    messages = []
    for where, message in raw:
        if not isinstance(message, dict) or not isinstance(message.get("id"), str):
            stream.problem(source, where, "message is not an object with an id",
                           compact_json(message, 300))
            continue
        messages.append({**message, "_where": where})
    summary = metadata.get("summary")
    kind = metadata.get("kind")
    return _Session(session_id, messages, summary if isinstance(summary, str) else None,
                    kind if isinstance(kind, str) else None)


def _replay(path: Path, stream: ImportStream) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """The metadata and the messages of a JSONL recording, its rewrites and rewinds applied."""
    metadata: dict[str, Any] = {}
    messages: dict[str, tuple[str, Any]] = {}
    for line, _offset, _size, record in read_events(path, TurnStart(0, 1), stream):
        where = f"line {line}"
        if isinstance(record.get("$rewindTo"), str):
            ids = list(messages)
            target = record["$rewindTo"]
            dropped = ids[ids.index(target):] if target in messages else ids
            for message_id in dropped:
                del messages[message_id]
            stream.skip("message dropped by a rewind", len(dropped))
        elif isinstance(record.get("$set"), dict):
            metadata.update(record["$set"])
        elif isinstance(record.get("id"), str):
            if record["id"] in messages:
                stream.skip("earlier version of a rewritten message")
                where = messages[record["id"]][0]
            messages[record["id"]] = (where, record)
        elif isinstance(record.get("sessionId"), str):
            metadata.update(record)
        else:
            stream.problem(str(path), where, "line is neither metadata nor a message",
                           compact_json(record, 300))
    return metadata, list(messages.values())


def parts_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a part list (thought
    parts left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return ""
    return "".join(str(p["text"]) for p in content if isinstance(p, dict)
                   and isinstance(p.get("text"), str) and p.get("thought") is not True)


def _files(content: Any) -> list[Attachment]:
    """The inline images and files a user's part list carries (name, type and size)."""
    found: list[Attachment] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        inline, linked = part.get("inlineData"), part.get("fileData")
        if isinstance(inline, dict):
            mime = str(inline.get("mimeType") or "application/octet-stream")
            data = inline.get("data")
            size = len(data) * 3 // 4 if isinstance(data, str) else 0
            found.append(Attachment(name=f"file-{len(found) + 1}.{mime.rsplit('/', 1)[-1]}",
                                    mime=mime, size=size))
        elif isinstance(linked, dict):
            uri = str(linked.get("fileUri") or f"file-{len(found) + 1}")
            found.append(Attachment(name=uri.rsplit("/", 1)[-1] or uri,
                                    mime=str(linked.get("mimeType") or "application/octet-stream"),
                                    size=0))
    return found


def _tool_result(call: dict[str, Any]) -> str:
    display = call.get("resultDisplay")
    if isinstance(display, str) and display.strip():
        return display
    texts: list[str] = []
    result = call.get("result")
    for part in result if isinstance(result, list) else [result]:
        response = part.get("functionResponse") if isinstance(part, dict) else None
        body = response.get("response") if isinstance(response, dict) else None
        if isinstance(body, dict):
            value = body.get("output", body.get("error", body))
            texts.append(value if isinstance(value, str) else compact_json(value))
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    if not texts and display is not None:
        texts.append(compact_json(display))
    return "\n".join(texts)


class _SessionImport:
    def __init__(self, path: Path, identity: Identity, stream: ImportStream,
                 session: _Session) -> None:
        self._source = str(path)
        self._identity = identity
        self._stream = stream
        self._session = session
        self._drafts: list[TurnDraft] = []
        self._replied = False
        self._waiting: list[ContextEvent] = []
        self._tokens: dict[str, tuple[int, int]] = {}

    def records(self) -> Iterator[TurnRecord]:
        if self._session.kind == "subagent":
            self._stream.skip("subagent session (its work is a tool call of its parent)")
            return
        for message in self._session.messages:
            at = time_of(message.get("timestamp"))
            if at is None:
                self._stream.problem(self._source, f"{message['_where']} id={message['id']}",
                                     "message has no valid timestamp", compact_json(message, 300))
                continue
            self._on_message(message, at)
        if self._waiting:
            self._stream.skip("context event before a turn not yet written", len(self._waiting))
        conversation = stable_id(self._session.session_id)
        title = self._session.summary
        if not title and self._drafts and self._drafts[0].submissions:
            title = self._drafts[0].submissions[0].text
        title = one_line(title) if title else None
        for draft in self._drafts:
            tokens = self._tokens.get(draft.turn_id)
            if tokens is not None:
                draft.usage = Usage(tokens_in=tokens[0], tokens_out=tokens[1])
            record = draft.finish(self._stream, self._identity, conversation, title or None,
                                  self._source, f"turn={draft.turn_id}")
            if record is not None:
                yield record

    def _on_message(self, message: dict[str, Any], at: datetime) -> None:
        kind = message.get("type")
        if kind == "user":
            self._on_user(message, at)
            return
        draft = self._drafts[-1] if self._drafts else None
        if kind == "gemini":
            if draft is None:
                self._stream.skip("gemini message before any prompt")
                return
            self._replied = True
            self._on_gemini(draft, message, at)
            return
        text = parts_text(message.get("content")).strip()
        if kind == "info" and text.startswith(_CANCELLED) and draft is not None:
            draft.unfinished = "interrupted"
            draft.touch(at)
            self._replied = True
            self._stream.count("cancelled request")
            return
        if kind in ("info", "warning", "error"):
            event = ContextEvent(kind=str(kind), at=at, data={"text": text_of(text)})
            if draft is None or (self._replied and kind == "info"):
                self._waiting.append(event)
                return
            self._stream.count(f"context event: {kind}")
            draft.context_events.append(event)
            if kind == "error" and draft.completion is None:
                draft.unfinished = "failed"
            return
        self._stream.skip(f"message of type {kind}")

    def _on_user(self, message: dict[str, Any], at: datetime) -> None:
        content = message.get("content")
        prompt = parts_text(content)
        display = message.get("displayContent")
        words = parts_text(display) if display is not None else prompt
        draft = self._drafts[-1] if self._drafts else None
        if words.strip() in _CONTINUATIONS and display is None:
            if draft is None:
                self._stream.skip("continuation prompt before any prompt")
                return
            self._stream.count("context event: continuation")
            draft.context_events.append(ContextEvent(kind="continuation", at=at,
                                                     data={"text": words.strip()}))
            return
        files = _files(content)
        if not words.strip() and not files:
            self._stream.skip("empty user message")
            return
        if draft is None or self._replied:
            draft = TurnDraft(stable_id(message["id"]))
            draft.context_events.extend(self._waiting)
            for event in self._waiting:
                self._stream.count(f"context event: {event.kind}")
            self._waiting = []
            self._drafts.append(draft)
            self._replied = False
        if display is not None and prompt.strip() and prompt.strip() != words.strip():
            self._stream.count("context event: expanded_prompt")
            draft.context_events.append(ContextEvent(kind="expanded_prompt", at=at,
                                                     data={"text": text_of(prompt)}))
        draft.add_user_text(words, at)
        draft.attachments.extend(files)

    def _on_gemini(self, draft: TurnDraft, message: dict[str, Any], at: datetime) -> None:
        thoughts = message.get("thoughts")
        for thought in thoughts if isinstance(thoughts, list) else []:
            if not isinstance(thought, dict):
                continue
            text = ": ".join(str(thought[k]).strip() for k in ("subject", "description")
                             if isinstance(thought.get(k), str) and thought[k].strip())
            if text:
                draft.add_step("reasoning", "completed",
                               time_of(thought.get("timestamp")) or at, text)
        calls = message.get("toolCalls")
        for call in calls if isinstance(calls, list) else []:
            if not isinstance(call, dict):
                self._stream.skip("tool call that is not an object")
                continue
            name = str(call.get("name") or call.get("displayName") or "tool")
            called = time_of(call.get("timestamp")) or at
            draft.add_step(name, "started", called, input_summary(name, call.get("args")))
            status: StepStatus = "failed" if call.get("status") in _FAILED_STATUSES \
                else "completed"
            draft.add_step(name, status, called, _tool_result(call))
        text = parts_text(message.get("content"))
        if text.strip() and draft.add_answer(text, at):
            self._stream.count("gemini message joined to the answer")
        tokens = message.get("tokens")
        if isinstance(tokens, dict):
            before = self._tokens.get(draft.turn_id, (0, 0))
            self._tokens[draft.turn_id] = (before[0] + _count(tokens.get("input")),
                                           before[1] + _count(tokens.get("output")))
        model = message.get("model")
        if isinstance(model, str) and not any(e.kind == "model" for e in draft.context_events):
            draft.context_events.append(ContextEvent(kind="model", at=at, data={"model": model}))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
