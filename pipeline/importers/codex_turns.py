"""A Codex turn being read: the copies of its messages from both sources, and how the copies
become the record's submissions, attachments, answer and usage (the response items' copies,
else the events')."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lake.records import Usage
from pipeline.importers.agent_files import TurnStart, data_url_attachment
from pipeline.importers.common import ImportStream, TurnDraft


@dataclass(frozen=True)
class Resume:
    """Where live capture resumes a rollout, and what it knew of the session there."""

    start: TurnStart
    session_id: str
    title: str | None
    tokens_before: Any = None


@dataclass
class Turn:
    """A turn being read, with both sources' copies of its messages."""

    draft: TurnDraft
    start: TurnStart
    tokens_before: Any
    item_texts: list[tuple[str, datetime]] = field(default_factory=list)
    event_texts: list[tuple[str, datetime]] = field(default_factory=list)
    item_images: list[str] = field(default_factory=list)
    event_images: list[str] = field(default_factory=list)
    item_answers: list[tuple[str, datetime]] = field(default_factory=list)
    event_answers: list[tuple[str, datetime]] = field(default_factory=list)
    last_message: tuple[str, datetime] | None = None
    tokens: tuple[int, int] = (0, 0)
    replied: bool = False
    # Set by task_complete or turn_aborted: what comes next belongs to the next turn.
    ended: bool = False
    codex_id: str | None = None
    had_context: bool = False


def fill(turn: Turn, stream: ImportStream) -> str | None:
    """Put the chosen copies of the user's words, images and answer on the turn's draft;
    returns the turn's first words (the session's title when it is the first turn)."""
    texts, images = ((turn.item_texts, turn.item_images) if turn.item_texts
                     else (turn.event_texts, turn.event_images))
    if turn.item_texts and turn.event_texts:
        stream.skip("user_message event (a copy of the prompt)", len(turn.event_texts))
    draft = turn.draft
    for text, at in texts:
        draft.add_user_text(text, at)
    for n, url in enumerate(images):
        draft.attachments.append(data_url_attachment(url, n))
    answers = turn.item_answers or turn.event_answers
    if turn.item_answers and turn.event_answers:
        stream.skip("agent_message event (a copy of the answer)", len(turn.event_answers))
    if not answers and turn.last_message is not None:
        answers = [turn.last_message]
    for text, at in answers:
        draft.add_answer(text, at)
    if len(answers) > 1:
        stream.count("assistant message joined to the answer", len(answers) - 1)
    if turn.tokens != (0, 0):
        draft.usage = Usage(tokens_in=turn.tokens[0], tokens_out=turn.tokens[1])
    return texts[0][0] if texts else None
