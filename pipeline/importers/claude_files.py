"""The files of Claude Code sessions: which transcripts a path names, a session's subagent
transcripts, and the readable events of a transcript from a byte offset on."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from lake.errors import RecordError
from pipeline.importers.common import ImportStream

SUBAGENT_DIR = "subagents"


def transcript_files(paths: Sequence[Path]) -> list[Path]:
    """The session transcript files named by ``paths``: files as given, folders expanded to
    their ``*.jsonl`` files (sorted) except subagent transcripts, which are read with their
    session; a path that does not exist raises RecordError."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*.jsonl")
                                if p.is_file() and p.parent.name != SUBAGENT_DIR))
        elif path.is_file():
            found.append(path)
        else:
            raise RecordError(f"Claude Code transcript path {path} does not exist")
    return found


def subagent_files(transcript: Path) -> list[Path]:
    """The subagent transcripts of a session file (``<session>/subagents/agent-*.jsonl``)."""
    folder = transcript.with_suffix("") / SUBAGENT_DIR
    return sorted(folder.glob("agent-*.jsonl")) if folder.is_dir() else []


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


def read_events(path: Path, start: TurnStart, stream: ImportStream
                ) -> Iterator[tuple[int, int, int, dict[str, Any]]]:
    """(line number, byte offset, size in bytes, event) of each readable line from ``start``
    on; unreadable lines are reported on ``stream`` and left out."""
    source = str(path)
    with path.open("rb") as fh:
        fh.seek(start.offset)
        offset = start.offset
        for number, raw in enumerate(fh, start=start.line):
            at_offset, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            where = f"line {number}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                stream.problem(source, where, f"line is not valid UTF-8 "
                               f"({exc.reason} at byte {exc.start})", raw)
                continue
            try:
                event = orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                # Only the last line can lack its newline: Claude Code was still writing it.
                reason = ("truncated last line" if not raw.endswith(b"\n")
                          else f"malformed JSON: {exc}")
                stream.problem(source, where, reason, raw)
                continue
            if not isinstance(event, dict):
                stream.problem(source, where, "line is not a JSON object", raw)
                continue
            yield number, at_offset, len(raw), event
