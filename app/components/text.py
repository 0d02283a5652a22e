"""Pure text helpers for rendering: Markdown escaping, query-term highlighting, sizes."""

from __future__ import annotations

import re
from typing import Literal

# Characters Streamlit's Markdown gives a meaning to (":" starts emoji and colour directives,
# "$" starts LaTeX, "<" raw HTML).
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")
_TERM = re.compile(r"[\w][\w'-]*", re.UNICODE)
_MIN_TERM = 2
_FENCE = re.compile(r"```+|~~~+")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_LINE_MARK = re.compile(r"(?m)^\s{0,3}(?:#{1,6}\s+|>\s?|[-*+]\s+|\d{1,3}[.)]\s+)")
_EMPHASIS = re.compile(r"\*\*|__|(?<!\w)[*_](?=\S)|(?<=\S)[*_](?!\w)|`+|~~")

BadgeColor = Literal["red", "orange", "yellow", "blue", "green", "violet", "gray", "grey",
                     "primary"]
ROLE_COLORS: dict[str, BadgeColor] = {
    "user": "blue", "assistant": "green", "summary": "violet", "anchor": "orange",
    "note": "gray", "attachment": "red"}
EVENT_TYPE_COLORS: dict[str, BadgeColor] = {
    "prompt": "blue", "followup": "violet", "steer": "orange"}


def escape_markdown(text: str) -> str:
    """Text that Streamlit's Markdown shows literally."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def query_terms(query: str) -> list[str]:
    """The distinct words of a query worth highlighting (two characters or more), longest
    first so that a longer term wins over a shorter one it contains."""
    seen: dict[str, str] = {}
    for term in _TERM.findall(query):
        if len(term) >= _MIN_TERM:
            seen.setdefault(term.lower(), term)
    return sorted(seen, key=lambda t: (-len(t), t))


def strip_markdown(text: str) -> str:
    """Plain text of a Markdown snippet: emphasis, code marks, headings, quotes, list
    bullets and link targets dropped; each list item or paragraph kept apart by " · "."""
    out = _FENCE.sub(" ", text)
    out = _LINK.sub(r"\1", out)
    out = _LINE_MARK.sub("", out)
    out = _EMPHASIS.sub("", out)
    parts = [" ".join(line.split()) for line in out.splitlines()]
    return " · ".join(p for p in parts if p)


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis: at a word's end
    when one ends in the last third (a word is never cut in two there), else mid-word."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[:limit - 1]
    space = cut.rfind(" ")
    if space >= (limit * 2) // 3:
        cut = cut[:space]
    return cut.rstrip() + "…"


def highlight_markdown(text: str, query: str, *, limit: int = 600) -> str:
    """``text`` (cut to ``limit`` characters) as escaped Markdown with every word that
    starts with a query term (case-insensitive, whole words only, so "the" never marks
    "other") marked with a background colour."""
    shown = text if len(text) <= limit else text[:limit].rstrip() + "…"
    terms = query_terms(query)
    if not terms:
        return escape_markdown(shown)
    pattern = re.compile(r"(?<![\w])(?:" + "|".join(re.escape(t) for t in terms)
                         + r")[\w'-]*", re.IGNORECASE)
    out: list[str] = []
    last = 0
    for match in pattern.finditer(shown):
        out.append(escape_markdown(shown[last:match.start()]))
        out.append(f":orange-background[{escape_markdown(match.group(0))}]")
        last = match.end()
    out.append(escape_markdown(shown[last:]))
    return "".join(out)


def human_bytes(size: int | None) -> str:
    """``1536`` -> ``"1.5 KB"``; None -> ``"-"``."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def compact_number(value: int) -> str:
    """``55076`` -> ``"55.1k"``, ``2_400_000`` -> ``"2.4M"``; small numbers unchanged."""
    for limit, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.1f}{suffix}"
    return str(value)
