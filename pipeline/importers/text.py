"""Text helpers of the importers: clipping, one-line titles, compact JSON details and the
snippets a problem report shows, each limit named once."""

from __future__ import annotations

import re
from typing import Any

import orjson

_WHITESPACE = re.compile(r"\s+")
RAW_SNIPPET_CHARS = 300
DETAIL_CHARS = 500
TITLE_CHARS = 80


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, marking the cut with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(text: str, limit: int = TITLE_CHARS) -> str:
    """``text`` with whitespace runs collapsed to single spaces, clipped to ``limit``."""
    return clip(_WHITESPACE.sub(" ", text).strip(), limit)


def compact_json(value: Any, limit: int = DETAIL_CHARS) -> str:
    """Compact JSON of ``value`` (non-JSON values via ``str``), clipped to ``limit``."""
    encoded = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    return clip(encoded, limit)


def snippet(raw: str | bytes) -> str:
    """The start of a raw input item, for a problem report."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    return clip(text.strip(), RAW_SNIPPET_CHARS)
