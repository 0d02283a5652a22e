"""Typed records the workbench passes between its service, components and pages.

They translate the lake's answers (whose turn payload parts are JSON objects) into small frozen
dataclasses, so that no page or component reaches into a dict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from lake.errors import QueryError, RefError
from lake.refs import parse_ref
from lake.search.access import Principal, Scope
from lake.search.coverage import DEFAULT_COVERAGE_GAIN
from lake.search.materialize import FileCard, MaterializedTurn, TurnParts
from lake.search.named_time import DEFAULT_TIME_WEIGHT, NamedTime, named_span
from lake.search.neighbours import DEFAULT_NEIGHBOUR_WEIGHT
from lake.search.relevance import DEFAULT_MIN_RELEVANCE
from lake.search.request import DEFAULT_WEIGHTS, GENERATORS, FusionSettings, Hit, SearchRequest
from lake.search.when import OrdinalLookup, resolve_when
from lake.tables import DEFAULT_SEARCH_ROLES


@dataclass(frozen=True)
class Viewer:
    """Who the workbench acts as: an analyst of ``tenant``, or (view as user) that user."""

    tenant: str
    as_user: str | None = None
    admin: bool = False  # signed in as an admin: purge and rebuild are offered

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

    @property
    def may_admin(self) -> bool:
        """Whether purge and rebuild may run: an admin, not viewing as one user."""
        return self.admin and self.as_user is None

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
    time_weight: float = DEFAULT_TIME_WEIGHT
    k: int = 10
    max_per_conversation: int | None = None
    min_relevance: float = DEFAULT_MIN_RELEVANCE
    neighbour_weight: float = DEFAULT_NEIGHBOUR_WEIGHT
    coverage_gain: float = DEFAULT_COVERAGE_GAIN
    agent: str | None = None  # only conversations this agent recorded
    app: str | None = None  # only conversations of this app

    def has_words(self) -> bool:
        """Whether the query holds a word to search (not only spaces and punctuation)."""
        return any(ch.isalnum() for ch in self.query)

    def generators_on(self) -> list[str]:
        """The generators that are switched on with a weight above 0."""
        on = ((self.semantic, self.semantic_weight), (self.lexical, self.lexical_weight),
              (self.trigram, self.trigram_weight))
        return [name for name, (enabled, weight) in zip(GENERATORS, on, strict=True)
                if enabled and weight > 0]

    def when_range(self, as_of: datetime) -> tuple[datetime | None, datetime | None] | None:
        """The When phrase's [start, end) (either end None: open), None without a phrase;
        QueryError for a phrase that names a turn position instead of a time."""
        if not self.when.strip():
            return None
        lookup = resolve_when(self.when, as_of)
        if isinstance(lookup, OrdinalLookup):
            raise QueryError(f"{self.when!r} names a turn position, not a time range; "
                             "open the conversation in Replay instead")
        return lookup.start, lookup.end

    def request(self, principal: Principal, as_of: datetime) -> SearchRequest:
        """The service request; a ``when`` phrase becomes the since/until range.

        Raises QueryError for a phrase that names a turn position instead of a time.
        """
        since, until = self.when_range(as_of) or (None, None)
        enabled = {"semantic": self.semantic, "lexical": self.lexical, "trigram": self.trigram}
        weights = {"semantic": self.semantic_weight, "lexical": self.lexical_weight,
                   "trigram": self.trigram_weight}
        return SearchRequest(
            self.query, principal, scope=self.scope, user_id=self.user_id,
            conversation_id=self.conversation_id, roles=self.roles, since=since, until=until,
            k=self.k, enabled=enabled, weights=weights, half_life_days=self.half_life_days,
            recency_weight=self.recency_weight, time_weight=self.time_weight, as_of=as_of,
            max_per_conversation=self.max_per_conversation, min_relevance=self.min_relevance,
            fusion=FusionSettings(neighbour_weight=self.neighbour_weight,
                                  coverage_gain=self.coverage_gain), agent=self.agent,
            app=self.app)


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
        fusion, the lift (recency times a named time's, lake.search.named_time), the final
        score (``fused × lift``) and the relevance."""
        lines = []
        for name in GENERATORS:
            rank = self.hit.ranks.get(name)
            lines.append(ScoreLine(name, rank.rank if rank else None,
                                   rank.score if rank else None))
        lines += [ScoreLine("fused", None, self.hit.fused), ScoreLine("lift", None, self.hit.lift),
                  ScoreLine("final", None, self.hit.score),
                  ScoreLine("relevance", None, self.hit.relevance)]
        return lines


@dataclass(frozen=True)
class SearchOutcome:
    """A search's hits with the service's freshness warnings and timings."""

    viewer: Viewer
    form: SearchForm
    hits: list[HitView]
    warnings: list[str]
    total_ms: float
    below_floor: int = 0  # candidates left out for a relevance below the form's floor
    named_times: tuple[NamedTime, ...] = ()  # times the query names, whose turns rank higher
    when_range: tuple[datetime | None, datetime | None] | None = None  # the When filter's
    turn_span: tuple[datetime, datetime] | None = None  # the view's first and last turn

    def when_notes(self) -> list[str]:
        """How the When phrase was read, and whether the view's turns lie outside it."""
        if self.when_range is None:
            return []
        start, end = self.when_range
        last_day = None if end is None else (end - timedelta(microseconds=1)).date()
        span = (f"{start:%Y-%m-%d} to {last_day}" if start is not None and last_day else
                f"from {start:%Y-%m-%d} on" if start is not None else f"up to {last_day}")
        notes = [f"When “{self.form.when.strip()}” read as {span} (UTC days, both included)."]
        if self.turn_span is not None:
            first, last = self.turn_span
            if end is not None and end <= first:
                notes.append(f"This view's turns start on {first:%Y-%m-%d}, after that time: "
                             "nothing in it can match.")
            elif start is not None and start > last:
                notes.append(f"This view's last turn is from {last:%Y-%m-%d}, before that "
                             "time: nothing in it can match.")
        return notes

    @property
    def query(self) -> str:
        """The query as typed."""
        return self.form.query

    def time_notes(self) -> list[str]:
        """How the query's named times were read (their turns rank higher)."""
        return [f"Read “{n.phrase}” as {named_span(n)}: turns then rank higher (Named-time "
                "weight 0 reads no time)." for n in self.named_times]

    def notes(self) -> list[str]:
        """Why the answer holds fewer turns than asked for, when the form explains it."""
        form = self.form
        if not form.generators_on():
            return ["Every generator is switched off or weighted 0, so nothing can find a "
                    "turn: switch on Semantic, Lexical or Trigram."]
        if self.hits and len(self.hits) < form.k:
            cap = ("no cap per conversation" if form.max_per_conversation == 0 else
                   f"at most {form.max_per_conversation} per conversation"
                   if form.max_per_conversation is not None else
                   "the default cap of turns per conversation (set Max per conversation to 0 "
                   "to lift it)")
            return [f"{len(self.hits)} turns, fewer than k = {form.k}: each generator hands "
                    "fusion only its best-ranked rows (the lexical and trigram ones only rows "
                    f"that share text with the query), rows fold into turns, and {cap} "
                    "applies."]
        return []

    def empty_state(self, echo: str) -> str:
        """What to say when the search found no turn (``echo``: the query as shown)."""
        if self.below_floor:
            return (f"Nothing in this scope is relevant to “{echo}”: {self.below_floor} "
                    f"weaker candidate turns fell below the relevance floor "
                    f"{self.form.min_relevance:g}. Lower “Relevance floor” (under Generators, "
                    "recency and limits) to see them anyway.")
        return f"No turn matches “{echo}” in this scope."


# A ref in text runs to the first space, quote or bracket; the sentence's trailing
# punctuation is not part of it.
REF_PATTERN = re.compile(r"conv:fi:[^\s\"'`<>()\[\]]+")
_TRAILING = ".,;:!?"


def parse_mention(raw: str) -> tuple[str, str] | None:
    """``(ref, file name)`` of a ``conv:fi:`` ref found in text, None when malformed."""
    ref = raw.rstrip(_TRAILING)
    try:
        parsed = parse_ref(ref)
    except RefError:
        return None
    return ref, parsed.path.rsplit("/", 1)[-1]


def mentioned_refs(text: str) -> list[tuple[str, str]]:
    """The well-formed ``conv:fi:`` refs a text mentions, as (ref, file name), once each."""
    found: dict[str, str] = {}
    for match in REF_PATTERN.finditer(text):
        mention = parse_mention(match.group(0))
        if mention is not None:
            found.setdefault(*mention)
    return list(found.items())


@dataclass(frozen=True)
class MentionView:
    """A file a ``conv:fi:`` ref in the answer names, resolved like a hosted file."""

    ref: str
    name: str
    data: bytes | None
    error: str | None


@dataclass(frozen=True)
class FileView:
    """A hosted file: its card and, when the resolver allowed it, its bytes."""

    card: FileCard
    data: bytes | None
    error: str | None


@dataclass(frozen=True)
class RefView:
    """A ``conv:*`` ref (not a file's) a turn's text names: its status for the viewer
    (found, missing, expired, invalid, refused), and the object it leads to as JSON."""

    ref: str
    status: str
    address: str | None = None
    value: str | None = None  # the resolved object, as indented JSON
    reason: str | None = None


@dataclass(frozen=True)
class ReplayTurn:
    """A materialized turn as Replay shows it: the lake's turn and its parts
    (:meth:`lake.search.materialize.MaterializedTurn.parts`), plus what the app adds: hosted
    files with their resolved bytes and the refs the answer and the attachments mention."""

    turn: MaterializedTurn
    parts: TurnParts
    files: list[FileView]
    mentions: list[MentionView]
    attached: dict[str, MentionView]  # attachment ref -> what the resolver gave for it
    refs: tuple[RefView, ...] = ()  # the other conv:* refs the completion and summary name

    @property
    def answer(self) -> str:
        """The completion's text."""
        return str(self.turn.completion["text"])

    @classmethod
    def build(cls, turn: MaterializedTurn, files: list[FileView],
              mentions: list[MentionView], attached: dict[str, MentionView],
              refs: tuple[RefView, ...] = ()) -> ReplayTurn:
        """A materialized turn with its resolved files and refs."""
        return cls(turn=turn, parts=turn.parts(), files=files, mentions=mentions,
                   attached=attached, refs=refs)
