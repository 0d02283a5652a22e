"""Pieces the importers of coding agents' session files share: which files a path names, reading
a JSONL file line by line from a byte offset, times, and tool-call summaries.

The line reader is Claude Code's (:func:`pipeline.importers.claude_files.read_events`): every
agent here appends one JSON object per line, and the same damage happens to all of them (a
last line still being written, invalid UTF-8, lone surrogates from Node's ``JSON.stringify``).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from lake.errors import RecordError
from lake.records import Attachment
from pipeline.importers.claude_events import event_time, input_summary
from pipeline.importers.claude_files import TRUNCATED, TurnStart, read_events
from pipeline.importers.text import clip

__all__ = ["TRUNCATED", "TurnStart", "data_url_attachment", "event_time", "find_files",
           "input_summary", "read_events", "text_of", "time_of"]

_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?(;base64)?,", re.IGNORECASE)
# What a context event keeps of a long harness text (instructions files run to many KB).
CONTEXT_TEXT_CHARS = 4000


def find_files(paths: Sequence[Path], matches: Callable[[Path], bool], what: str) -> list[Path]:
    """The files named by ``paths``: files as given, folders searched (recursively, sorted) for
    files ``matches`` accepts; a path that does not exist raises RecordError naming ``what``."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*") if p.is_file() and matches(p)))
        elif path.is_file():
            found.append(path)
        else:
            raise RecordError(f"{what} path {path} does not exist")
    return found


def time_of(value: Any) -> datetime | None:
    """An ISO 8601 time (``Z`` or an offset; naive is UTC) as an aware UTC datetime."""
    if isinstance(value, str) and value.endswith("Z"):
        value = value[:-1] + "+00:00"
    return event_time(value)


def text_of(value: Any, limit: int = CONTEXT_TEXT_CHARS) -> str:
    """A harness text clipped for a context event."""
    return clip(value.strip(), limit) if isinstance(value, str) else ""


def data_url_attachment(url: str, index: int) -> Attachment:
    """An image the user attached, from its data URL (or remote URL): name, type and size, not
    the bytes (they stay in the agent's own file)."""
    match = _DATA_URL.match(url)
    mime = (match.group(1) if match and match.group(1) else "image/png").lower()
    size = 0
    if match and match.group(2):
        try:
            size = len(base64.b64decode(url[match.end():], validate=False))
        except (binascii.Error, ValueError):
            size = 0
    extension = mime.rsplit("/", 1)[-1]
    return Attachment(name=f"image-{index + 1}.{extension}", mime=mime, size=size)
