"""Import Claude Code session transcripts (``~/.claude/projects/<project>/<session>.jsonl``).

Each line is one event. One ``sessionId`` is one conversation. A user message with text opens a
turn; user texts that arrive before any assistant event of that turn fold in as follow-ups.
``tool_use`` blocks become started steps and ``tool_result`` blocks completed or failed steps
(each with a ``chat.step`` live event); the turn's last assistant text is its completion.
Events are taken in file order, which is the order Claude Code appended them.

A file is read completely before its turns are yielded because the conversation title (a
``summary`` event) can come anywhere in it; memory is bounded by the largest transcript file.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from lake.errors import RecordError
from lake.records import Attachment, ContextEvent, StepStatus, TurnRecord, Usage
from pipeline.importers.common import (
    DETAIL_CHARS,
    Identity,
    ImportStream,
    TurnDraft,
    as_utc,
    clip,
    compact_json,
    one_line,
    stable_id,
)

_INTERRUPT_MARKER = "[Request interrupted by user"
_THINKING_BLOCKS = ("thinking", "redacted_thinking")


def iter_claude_code(paths: Sequence[Path], *, tenant: str, user_id: str,
                     app: str = "claude-code", agent: str = "claude-code") -> ImportStream:
    """Turn records from Claude Code transcripts: ``.jsonl`` files, or folders searched for them.

    Raises RecordError at once when a path does not exist or an identity part is not a valid id;
    problems inside the files are reported on the returned stream while it is consumed.
    """
    identity = Identity(tenant=tenant, user_id=user_id, app=app, agent=agent)
    files = transcript_files(paths)

    def produce(stream: ImportStream) -> Iterator[TurnRecord]:
        for path in files:
            yield from _TranscriptImport(path, identity, stream).records()

    return ImportStream(produce)


def transcript_files(paths: Sequence[Path]) -> list[Path]:
    """The transcript files named by ``paths``: files as given, folders expanded to their
    ``*.jsonl`` files (sorted); a path that does not exist raises RecordError."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*.jsonl") if p.is_file()))
        elif path.is_file():
            found.append(path)
        else:
            raise RecordError(f"Claude Code transcript path {path} does not exist")
    return found


@dataclass
class _Turn:
    draft: TurnDraft
    line: int
    # Any assistant event (text or tool use) ends the window in which user texts fold in.
    replied: bool = False
    # Claude Code writes one event per content block, each repeating its API message's usage,
    # so usage is kept per message id and summed once per message.
    usage: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass
class _Session:
    conversation_id: str
    turns: list[_Turn] = field(default_factory=list)
    uuids: set[str] = field(default_factory=set)
    tool_names: dict[str, str] = field(default_factory=dict)


class _TranscriptImport:
    """The import of one transcript file."""

    def __init__(self, path: Path, identity: Identity, stream: ImportStream) -> None:
        self._path = path
        self._source = str(path)
        self._identity = identity
        self._stream = stream
        self._sessions: dict[str, _Session] = {}
        self._summaries: list[tuple[str | None, str]] = []

    def records(self) -> Iterator[TurnRecord]:
        """Read the file, then yield its turns session by session."""
        for line, event in self._events():
            self._on_event(line, event)
        single = len(self._sessions) == 1
        for session in self._sessions.values():
            title = self._title(session, single)
            for turn in session.turns:
                if turn.usage:
                    turn.draft.usage = Usage(
                        tokens_in=sum(i for i, _ in turn.usage.values()),
                        tokens_out=sum(o for _, o in turn.usage.values()))
                record = turn.draft.finish(self._stream, self._identity, session.conversation_id,
                                           title, self._source, f"line {turn.line}")
                if record is not None:
                    yield record

    def _events(self) -> Iterator[tuple[int, dict[str, Any]]]:
        with self._path.open("rb") as fh:
            for number, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                where = f"line {number}"
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    self._stream.problem(self._source, where, f"line is not valid UTF-8 "
                                         f"({exc.reason} at byte {exc.start})", raw)
                    continue
                try:
                    event = orjson.loads(text)
                except orjson.JSONDecodeError as exc:
                    # Only the last line can lack its newline: Claude Code was still writing it.
                    reason = ("truncated last line" if not raw.endswith(b"\n")
                              else f"malformed JSON: {exc}")
                    self._stream.problem(self._source, where, reason, raw)
                    continue
                if not isinstance(event, dict):
                    self._stream.problem(self._source, where, "line is not a JSON object", raw)
                    continue
                yield number, event

    def _on_event(self, line: int, event: dict[str, Any]) -> None:
        kind = event.get("type")
        where = f"line {line}"
        if kind == "summary":
            self._on_summary(event, where)
            return
        if event.get("isSidechain") is True:
            self._stream.skip("sidechain event")
            return
        if kind not in ("user", "assistant"):
            self._stream.skip("system event" if kind == "system"
                              else f"unsupported event type: {kind}")
            return
        message = event.get("message")
        at = _timestamp(event.get("timestamp"))
        if not isinstance(message, dict):
            self._stream.problem(self._source, where, f"{kind} event has no message object",
                                 compact_json(event, DETAIL_CHARS))
            return
        if at is None:
            self._stream.problem(self._source, where, f"{kind} event has no valid timestamp",
                                 compact_json(event, DETAIL_CHARS))
            return
        session = self._session(event)
        if kind == "user":
            self._on_user(session, event, message, at, line)
        else:
            self._on_assistant(session, message, at)

    def _on_summary(self, event: dict[str, Any], where: str) -> None:
        text = event.get("summary")
        if not isinstance(text, str) or not text.strip():
            self._stream.problem(self._source, where, "summary event has no summary text",
                                 compact_json(event, DETAIL_CHARS))
            return
        leaf = event.get("leafUuid")
        self._summaries.append((leaf if isinstance(leaf, str) else None, text))

    def _session(self, event: dict[str, Any]) -> _Session:
        raw_id = event.get("sessionId")
        key = raw_id if isinstance(raw_id, str) and raw_id else self._path.stem
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = _Session(stable_id(key))
        uuid = event.get("uuid")
        if isinstance(uuid, str):
            session.uuids.add(uuid)
        return session

    def _on_user(self, session: _Session, event: dict[str, Any], message: dict[str, Any],
                 at: datetime, line: int) -> None:
        # Meta messages and compaction summaries are written by Claude Code, not typed by the user.
        if event.get("isMeta") is True:
            self._stream.skip("meta message")
            return
        if event.get("isCompactSummary") is True:
            self._stream.skip("compact summary")
            return
        texts: list[str] = []
        images: list[dict[str, Any]] = []
        for block in _blocks(message.get("content")):
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "tool_result":
                self._on_tool_result(session, block, at)
            elif kind == "image":
                images.append(block)
            else:
                self._stream.skip(f"unsupported block type: {kind}")
        text = "\n".join(t for t in texts if t.strip())
        if text.startswith(_INTERRUPT_MARKER):
            self._stream.skip("interrupt marker")
            return
        if not text and not images:
            return
        turn = session.turns[-1] if session.turns else None
        if turn is None or turn.replied:
            turn = self._open_turn(session, event, at, line)
        turn.draft.add_user_text(text, at)
        for image in images:
            turn.draft.attachments.append(_image_attachment(image, len(turn.draft.attachments)))

    def _open_turn(self, session: _Session, event: dict[str, Any], at: datetime,
                   line: int) -> _Turn:
        uuid = event.get("uuid")
        external = uuid if isinstance(uuid, str) and uuid else f"{self._path.name}:{line}"
        turn = _Turn(TurnDraft(stable_id(external)), line)
        workspace = {name: event[key] for name, key in
                     (("cwd", "cwd"), ("git_branch", "gitBranch"), ("version", "version"))
                     if isinstance(event.get(key), str) and event[key]}
        if workspace:
            turn.draft.context_events.append(ContextEvent(kind="workspace", at=at,
                                                           data=workspace))
        session.turns.append(turn)
        return turn

    def _on_tool_result(self, session: _Session, block: dict[str, Any], at: datetime) -> None:
        if not session.turns:
            self._stream.skip("tool result before any prompt")
            return
        tool_id = block.get("tool_use_id")
        tool_id = tool_id if isinstance(tool_id, str) else ""
        name = session.tool_names.get(tool_id, "tool")
        status: StepStatus = "failed" if block.get("is_error") is True else "completed"
        detail = clip(_result_text(block.get("content")), DETAIL_CHARS) or None
        session.turns[-1].draft.add_step(name, status, at, detail, tool_use_id=tool_id)

    def _on_assistant(self, session: _Session, message: dict[str, Any], at: datetime) -> None:
        if not session.turns:
            self._stream.skip("assistant event before any prompt")
            return
        turn = session.turns[-1]
        turn.replied = True
        for block in _blocks(message.get("content")):
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                if block["text"].strip():
                    turn.draft.complete(block["text"], at)
            elif kind == "tool_use":
                name = block.get("name")
                name = name if isinstance(name, str) and name else "tool"
                tool_id = block.get("id")
                tool_id = tool_id if isinstance(tool_id, str) else ""
                session.tool_names[tool_id] = name
                turn.draft.add_step(name, "started", at, compact_json(block.get("input", {})),
                                    tool_use_id=tool_id)
            elif kind in _THINKING_BLOCKS:
                self._stream.skip("thinking block")
            else:
                self._stream.skip(f"unsupported block type: {kind}")
        usage = message.get("usage")
        if isinstance(usage, dict):
            message_id = message.get("id")
            key = message_id if isinstance(message_id, str) else f"#{len(turn.usage)}"
            turn.usage[key] = (_count(usage.get("input_tokens")),
                               _count(usage.get("output_tokens")))

    def _title(self, session: _Session, single: bool) -> str | None:
        # A summary names the conversation whose messages hold its leafUuid; in a file with a
        # single session every summary belongs to it.
        for leaf, text in reversed(self._summaries):
            if single or leaf is None or leaf in session.uuids:
                return one_line(text)
        for turn in session.turns:
            if turn.draft.submissions and turn.draft.submissions[0].text.strip():
                return one_line(turn.draft.submissions[0].text)
        return None


def _blocks(content: Any) -> list[dict[str, Any]]:
    """Message content as a list of blocks: a plain string is one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b if isinstance(b, dict) else {"type": type(b).__name__} for b in content]
    return []


def _result_text(content: Any) -> str:
    """The readable text of a tool_result's content (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in _blocks(content):
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        else:
            parts.append(f"[{block.get('type')}]")
    return "\n".join(parts)


def _image_attachment(block: dict[str, Any], index: int) -> Attachment:
    source = block.get("source")
    source = source if isinstance(source, dict) else {}
    mime = source.get("media_type")
    mime = mime if isinstance(mime, str) and mime else "application/octet-stream"
    data = source.get("data")
    # Base64 carries 3 bytes per 4 characters, less its padding.
    size = len(data) * 3 // 4 - data[-2:].count("=") if isinstance(data, str) else 0
    extension = mime.rsplit("/", 1)[-1]
    return Attachment(name=f"image-{index + 1}.{extension}", mime=mime, size=max(size, 0))


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return as_utc(datetime.fromisoformat(value))
    except ValueError:
        return None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
