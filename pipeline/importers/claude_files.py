"""The files of Claude Code sessions: which transcripts a path names, a session's subagent
transcripts, and the readable events of a transcript from a byte offset on."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from lake.errors import RecordError
from pipeline.importers.common import ImportStream

SUBAGENT_DIR = "subagents"
SUBAGENT_PREFIX = "agent-"
TRUNCATED = "truncated last line"
# A surrogate code point left alone after JSON decoding (a pair becomes one character).
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def transcript_files(paths: Sequence[Path]) -> list[Path]:
    """The session transcript files named by ``paths``: files as given, folders expanded to
    their ``*.jsonl`` files (sorted) except subagent transcripts, which are read with their
    session; a path that does not exist raises RecordError."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*.jsonl")
                                if p.is_file() and p.parent.name != SUBAGENT_DIR
                                and not _beside_its_session(p)))
        elif path.is_file():
            found.append(path)
        else:
            raise RecordError(f"Claude Code transcript path {path} does not exist")
    return found


def subagent_files(transcript: Path) -> list[Path]:
    """The subagent transcripts of a session file: ``<session>/subagents/agent-*.jsonl``, and
    the ``agent-*.jsonl`` beside it whose events name its session (where Claude Code before
    2.1.2 wrote them)."""
    folder = transcript.with_suffix("") / SUBAGENT_DIR
    nested = sorted(folder.glob(f"{SUBAGENT_PREFIX}*.jsonl")) if folder.is_dir() else []
    legacy = sorted(p for p in transcript.parent.glob(f"{SUBAGENT_PREFIX}*.jsonl")
                    if p != transcript and _session_id(p) == transcript.stem)
    return nested + legacy


# Each legacy subagent file's session, once read: every session of a folder looks at every
# agent-*.jsonl beside it, and a first event's sessionId never changes once written.
_SESSION_OF: dict[Path, str] = {}


def _session_id(path: Path) -> str | None:
    """The ``sessionId`` of the first event of a transcript, if it can be read (yet)."""
    if path in _SESSION_OF:
        return _SESSION_OF[path]
    try:
        with path.open("rb") as fh:
            event = orjson.loads(fh.readline())
    except (OSError, orjson.JSONDecodeError):
        return None
    session = event.get("sessionId") if isinstance(event, dict) else None
    if not isinstance(session, str) or not session:
        return None
    _SESSION_OF[path] = session
    return session


def _beside_its_session(path: Path) -> bool:
    """Whether ``path`` is a legacy subagent transcript whose session file is beside it (it is
    read with that session, not as a session of its own)."""
    if not path.name.startswith(SUBAGENT_PREFIX):
        return False
    session = _session_id(path)
    return session is not None and (path.parent / f"{session}.jsonl").is_file()


@dataclass(frozen=True)
class TurnStart:
    """Where a turn's part of its file begins (``offset``, ``line``: the first line after the
    previous turn's last event, so the context events that precede it are included) and where
    its opening event is (``open_offset``, whose event has ``uuid``). Live capture resumes
    reading at ``offset`` and checks ``uuid`` at ``open_offset`` first."""

    offset: int
    line: int
    uuid: str | None = None
    open_offset: int = 0


def read_events(path: Path, start: TurnStart, stream: ImportStream,
                on_unreadable: Callable[[], None] | None = None
                ) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
    """(line number, byte offset, size in bytes, event) of each readable line from ``start``
    on; unreadable lines are reported on ``stream``, left out, and signalled to
    ``on_unreadable`` (what came after them may have lost the event it belonged to)."""
    source = str(path)
    with path.open("rb") as fh:
        fh.seek(start.offset)
        offset = start.offset
        for number, raw in enumerate(fh, start=start.line):
            at_offset, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            where = f"line {number}"
            event = _decode(raw, source, where, stream)
            if event is None:
                if on_unreadable is not None:
                    on_unreadable()
                continue
            yield number, at_offset, len(raw), event


def _decode(raw: bytes, source: str, where: str, stream: ImportStream) -> dict[str, Any] | None:
    """The event of one line, or None after reporting why it cannot be read."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        stream.problem(source, where, f"line is not valid UTF-8 "
                       f"({exc.reason} at byte {exc.start})", raw)
        return None
    try:
        event = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        event = _with_lone_surrogates(text)
        if event is None:
            # Only the last line can lack its newline: Claude Code was still writing it.
            reason = TRUNCATED if not raw.endswith(b"\n") else f"malformed JSON: {exc}"
            stream.problem(source, where, reason, raw)
            return None
        stream.count("lone surrogate replaced with U+FFFD")
    if not isinstance(event, dict):
        stream.problem(source, where, "line is not a JSON object", raw)
        return None
    return event


def _with_lone_surrogates(text: str) -> Any:
    """The JSON value of a line orjson refused, read again allowing lone surrogate escapes
    (``\\ud83d``: Node's JSON.stringify writes them for a string cut inside an emoji), each
    replaced with U+FFFD; None when the line is malformed anyway."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return _repair(value)


def _repair(value: Any) -> Any:
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_repair(v) for v in value]
    if isinstance(value, dict):
        return {_repair(k): _repair(v) for k, v in value.items()}
    return value
