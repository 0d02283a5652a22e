"""Pure helpers of the replay: recorded events sorted by how they render, badge texts, and the
``conv:fi:`` refs an answer mentions."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.components.text import escape_markdown
from app.models import REF_PATTERN, parse_mention
from lake.records import Citation
from lake.search.materialize import RecordedEvent


@dataclass
class EventGroups:
    """A turn's recorded events, by how Replay draws them (each list in replay order)."""

    panels: list[RecordedEvent] = field(default_factory=list)
    badges: list[RecordedEvent] = field(default_factory=list)
    citations: list[Citation] = field(default_factory=list)
    other: list[RecordedEvent] = field(default_factory=list)


def group_events(events: list[RecordedEvent]) -> EventGroups:
    """Sort events into panels, badges, citations and the rest; ``chat.step`` events are left
    out, since the steps timeline of the turn shows them."""
    groups = EventGroups()
    for event in events:
        if event.type == "chat.step":
            continue
        if event.type.startswith("panel."):
            groups.panels.append(event)
        elif event.type.startswith("badge."):
            groups.badges.append(event)
        elif event.type.startswith("citation") and event.field("url"):
            url = event.field("url") or ""
            groups.citations.append(Citation(title=event.field("title") or url, url=url,
                                             snippet=event.field("snippet")))
        else:
            groups.other.append(event)
    return groups


def badge_text(event: RecordedEvent) -> str:
    """A badge's Markdown-safe label: ``badge.cost {"usd": 0.01, "tokens": 900}`` reads
    ``cost $0.0100 · 900 tokens``."""
    name = escape_markdown(event.type.removeprefix("badge."))
    data = event.data
    if not isinstance(data, dict):
        return name if data is None else f"{name} {escape_markdown(str(data))}"
    parts = []
    for key, value in data.items():
        if key in ("usd", "cost_usd") and isinstance(value, int | float):
            parts.append(f"\\${value:.4f}")
        elif key == "tokens" and isinstance(value, int):
            parts.append(f"{value:,} tokens")
        elif key in ("ms", "duration_ms") and isinstance(value, int | float):
            parts.append(f"{value / 1000:.1f} s")
        elif key in ("label", "text", "value"):
            parts.append(escape_markdown(str(value)))
        else:
            parts.append(f"{escape_markdown(str(key))} {escape_markdown(str(value))}")
    return " · ".join([name, *parts]) if parts else name


def ref_mentions(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The answer with each well-formed ``conv:fi:`` ref replaced by its file name in bold,
    and the (ref, file name) pairs in order of first mention; malformed refs stay as text."""
    found: dict[str, str] = {}

    def swap(match: re.Match[str]) -> str:
        raw = match.group(0)
        mention = parse_mention(raw)
        if mention is None:
            return raw
        ref, name = mention
        found.setdefault(ref, name)
        # Not a link (Markdown cannot download): the name, and where its download is.
        return (f":material/attach_file: **{escape_markdown(name)}** :gray[(file below)]"
                + raw[len(ref):])

    return REF_PATTERN.sub(swap, text), list(found.items())


def refs_as_names(text: str) -> str:
    """Plain text with each well-formed ``conv:fi:`` ref replaced by its file name (a search
    snippet shows names, not storage addresses)."""
    def swap(match: re.Match[str]) -> str:
        raw = match.group(0)
        mention = parse_mention(raw)
        return raw if mention is None else mention[1] + raw[len(mention[0]):]

    return REF_PATTERN.sub(swap, text)
