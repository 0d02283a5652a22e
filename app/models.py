"""Typed records the workbench passes between its service, components and pages.

They translate the lake's answers (whose turn payload parts are JSON objects) into small frozen
dataclasses, so that no page or component reaches into a dict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lake.errors import QueryError
from lake.search.access import Principal, Scope
from lake.search.materialize import FileCard, MaterializedTurn
from lake.search.request import DEFAULT_WEIGHTS, GENERATORS, Hit, SearchRequest
from lake.search.when import OrdinalLookup, resolve_when
from lake.tables import DEFAULT_SEARCH_ROLES


@dataclass(frozen=True)
class Viewer:
    """Who the workbench acts as: an analyst of ``tenant``, or (view as user) that user."""

    tenant: str
    as_user: str | None = None

    @property
    def principal(self) -> Principal:
        """The principal every read goes through: the same rules as the CLI's."""
        if self.as_user is None:
            return Principal(self.tenant, analyst=True)
        return Principal(self.tenant, self.as_user)

    @property
    def is_analyst(self) -> bool:
        """Whether the workbench acts as an analyst (not viewing as one user)."""
        return self.as_user is None

    def describe(self) -> str:
        """A short label for the sidebar."""
        if self.as_user is None:
            return f"analyst of {self.tenant}"
        return f"user {self.as_user} of {self.tenant}"


@dataclass(frozen=True)
class SearchForm:
    """What the search page's form holds; :meth:`request` turns it into a SearchRequest."""

    query: str
    scope: Scope = "user"
    user_id: str | None = None
    conversation_id: str | None = None
    roles: tuple[str, ...] = DEFAULT_SEARCH_ROLES
    when: str = ""
    semantic: bool = True
    lexical: bool = True
    trigram: bool = True
    semantic_weight: float = DEFAULT_WEIGHTS["semantic"]
    lexical_weight: float = DEFAULT_WEIGHTS["lexical"]
    trigram_weight: float = DEFAULT_WEIGHTS["trigram"]
    half_life_days: float = 7.0
    recency_weight: float = 1.0
    k: int = 10
    max_per_conversation: int | None = None

    def request(self, principal: Principal, as_of: datetime) -> SearchRequest:
        """The service request; a ``when`` phrase becomes the since/until range.

        Raises QueryError for a phrase that names a turn position instead of a time.
        """
        since = until = None
        if self.when.strip():
            lookup = resolve_when(self.when, as_of)
            if isinstance(lookup, OrdinalLookup):
                raise QueryError(f"{self.when!r} names a turn position, not a time range; "
                                 "open the conversation in Replay instead")
            since, until = lookup.start, lookup.end
        enabled = {"semantic": self.semantic, "lexical": self.lexical, "trigram": self.trigram}
        weights = {"semantic": self.semantic_weight, "lexical": self.lexical_weight,
                   "trigram": self.trigram_weight}
        return SearchRequest(
            self.query, principal, scope=self.scope, user_id=self.user_id,
            conversation_id=self.conversation_id, roles=self.roles, since=since, until=until,
            k=self.k, enabled=enabled, weights=weights, half_life_days=self.half_life_days,
            recency_weight=self.recency_weight, as_of=as_of,
            max_per_conversation=self.max_per_conversation)


@dataclass(frozen=True)
class ScoreLine:
    """One line of a hit's score breakdown: a generator's rank and score, or a fused figure."""

    component: str
    rank: int | None
    score: float | None


@dataclass(frozen=True)
class HitView:
    """A search hit with its conversation's title."""

    hit: Hit
    title: str | None

    def breakdown(self) -> list[ScoreLine]:
        """Rank and score per generator (None when it did not find the turn), then the RRF
        fusion, the recency lift and the final score (``rrf × lift``)."""
        lines = []
        for name in GENERATORS:
            rank = self.hit.ranks.get(name)
            lines.append(ScoreLine(name, rank.rank if rank else None,
                                   rank.score if rank else None))
        lines += [ScoreLine("rrf", None, self.hit.rrf), ScoreLine("recency lift", None,
                                                                  self.hit.lift),
                  ScoreLine("final", None, self.hit.score)]
        return lines


@dataclass(frozen=True)
class SearchOutcome:
    """A search's hits with the service's freshness warnings and timings."""

    viewer: Viewer
    query: str
    hits: list[HitView]
    warnings: list[str]
    total_ms: float


@dataclass(frozen=True)
class SubmissionView:
    """A user message of the turn, with its kind (prompt / followup / steer)."""

    text: str
    event_type: str
    batch: int
    arrived_at: str


@dataclass(frozen=True)
class AttachmentView:
    """A file the user attached (its bytes are not hosted by turnlake)."""

    name: str
    mime: str
    size: int
    ref: str | None
    has_text: bool


@dataclass(frozen=True)
class FileView:
    """A hosted file: its card and, when the resolver allowed it, its bytes."""

    card: FileCard
    data: bytes | None
    error: str | None


@dataclass(frozen=True)
class StepView:
    """A progress step of the turn."""

    name: str
    status: str
    at: str
    detail: str | None


@dataclass(frozen=True)
class CitationView:
    """A source the answer cited."""

    title: str
    url: str
    snippet: str | None


@dataclass(frozen=True)
class EventView:
    """A recorded event (context event, step or live event), in replay order."""

    seq: int
    source: str
    type: str
    at: str
    data_json: str


@dataclass(frozen=True)
class UsageView:
    """Token and cost accounting of the turn."""

    tokens_in: int | None
    tokens_out: int | None
    cost_usd: float | None
    duration_ms: int | None


@dataclass(frozen=True)
class FeedbackView:
    """The user's rating of the turn."""

    rating: int
    comment: str | None


@dataclass(frozen=True)
class ReplayTurn:
    """Everything the Replay page shows for one turn."""

    conversation_id: str
    turn_id: str
    user_id: str
    app: str
    agent: str
    writer: str
    title: str | None
    ordinal: int
    started_at: datetime
    ended_at: datetime
    submissions: list[SubmissionView]
    answer: str
    answered_at: str
    attachments: list[AttachmentView]
    files: list[FileView]
    steps: list[StepView]
    citations: list[CitationView]
    events: list[EventView]
    usage: UsageView | None
    feedback: FeedbackView | None
    summary: str | None
    anchors: list[str]
    notes: list[str]

    @classmethod
    def build(cls, turn: MaterializedTurn, files: list[FileView]) -> ReplayTurn:
        """Translate a materialized turn (and its resolved files) into the typed view."""
        usage, feedback = turn.usage, turn.feedback
        return cls(
            conversation_id=turn.conversation_id, turn_id=turn.turn_id, user_id=turn.user_id,
            app=turn.app, agent=turn.agent, writer=turn.writer, title=turn.title,
            ordinal=turn.ordinal, started_at=turn.started_at, ended_at=turn.ended_at,
            submissions=[SubmissionView(str(s["text"]), str(s["event_type"]), int(s["batch"]),
                                        str(s["arrived_at"])) for s in turn.submissions],
            answer=str(turn.completion["text"]), answered_at=str(turn.completion["at"]),
            attachments=[AttachmentView(str(a["name"]), str(a["mime"]), int(a["size"]),
                                        a.get("ref"), bool(a.get("text")))
                         for a in turn.attachments],
            files=files,
            # A timeline: adapters may report steps out of order.
            steps=sorted((StepView(str(s["name"]), str(s["status"]), str(s["at"]),
                                   s.get("detail")) for s in turn.steps),
                         key=lambda step: datetime.fromisoformat(step.at)),
            citations=[CitationView(str(c["title"]), str(c["url"]), c.get("snippet"))
                       for c in turn.citations],
            events=[EventView(int(e["seq"]), str(e["source"]), str(e["type"]), str(e["at"]),
                              _compact_json(e["data"])) for e in turn.events],
            usage=None if usage is None else UsageView(
                usage.get("tokens_in"), usage.get("tokens_out"), usage.get("cost_usd"),
                usage.get("duration_ms")),
            feedback=None if feedback is None else FeedbackView(int(feedback["rating"]),
                                                                feedback.get("comment")),
            summary=turn.summary, anchors=list(turn.anchors), notes=list(turn.notes))


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
