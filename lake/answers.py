"""The readers' light answer records: a listed conversation, one item of a pull.

They are part of the JSON contract (pipeline.contract), which the Python client (turnlake)
imports without the database's heavy dependencies, so they live apart from the catalog and
the workspace puller that build them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

PULL_MANIFEST = ".turnlake-pull.json"  # the manifest a pull writes in its folder
PullStatus = Literal["pulled", "unchanged", "expired", "refused", "conflict", "unsafe",
                     "not_hosted", "invalid"]
PullKind = Literal["file", "attachment"]
_DONE: frozenset[str] = frozenset({"pulled", "unchanged"})


@dataclass(frozen=True)
class ConversationEntry:
    """A conversation as listed from its conv.timeline.v1."""

    tenant: str
    conversation_id: str
    user_id: str
    app: str
    agent: str
    title: str | None
    started_at: datetime
    last_activity_at: datetime
    turn_count: int
    last_turn_id: str


@dataclass(frozen=True)
class PullItem:
    """The outcome for one file (or for a target that yielded no file): where it went, or why
    it was not pulled."""

    target: str
    status: PullStatus
    kind: PullKind = "file"
    ref: str | None = None
    path: str | None = None
    sha256: str | None = None
    size: int | None = None
    expires_at: datetime | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        """True when the file is in the workspace (pulled now or before)."""
        return self.status in _DONE
