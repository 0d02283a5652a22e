"""The JSON contract of turnlake's readers, shared by the CLI and the HTTP service.

One pydantic definition per shape: the CLI's ``search --queries`` lines and ``--json``
output, and the service's request bodies and answers (and so its OpenAPI document), are
these models. The service's bodies carry no identity: tenant, user role and analyst come
from the API key (``QueryOptions``); a ``--queries`` line adds them (``QueryLine``).

The Python client (``turnlake``) uses these models too, in a host that has none of the
database's heavy packages: this module imports only pydantic and lake's light modules
(tests/turnlake/test_light_imports.py holds it to that).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from lake.answers import PULL_MANIFEST, ConversationEntry, PullItem
from lake.errors import QueryError
from lake.records import describe_validation_error
from lake.search.access import Principal, Scope
from lake.search.defaults import (
    DEFAULT_COVERAGE_GAIN,
    DEFAULT_MIN_RELEVANCE,
    DEFAULT_NEIGHBOUR_WEIGHT,
    DEFAULT_SEARCH_ROLES,
    DEFAULT_TIME_WEIGHT,
)
from lake.search.request import (
    DEFAULT_WEIGHTS,
    FusionSettings,
    Hit,
    IsoInstant,
    SearchRequest,
    SearchResult,
)

TurnStatus = Literal["accepted", "duplicate", "rejected"]


def parse_time(value: str | None, what: str) -> datetime | None:
    """An ISO 8601 time (date-only means midnight UTC; no offset means UTC)."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise QueryError(f"{what} {value!r} is not an ISO 8601 time", field=what) from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class QueryOptions(BaseModel):
    """One search's options, without the principal (``POST /v1/search``'s body)."""

    model_config = ConfigDict(extra="forbid")

    id: StrictStr | StrictInt | None = Field(default=None,
                                             description="Echoed back, to match answers.")
    query: str = Field(description="What to look for.")
    user: str | None = Field(default=None, description="The user an analyst looks at (an end "
                             "user may only name itself).")
    scope: Scope = Field(default="user", description="conversation, user or tenant.")
    conversation: str | None = None
    roles: list[str] | str | None = Field(default=None, description="Roles to search (default "
                                          "user, assistant, summary, anchor, attachment).")
    role: list[str] | str | None = Field(default=None, description="Same as roles.")
    k: int = Field(default=10, ge=1, le=1000, description="Number of turns to return.")
    since: str | None = Field(default=None, description="Only turns at or after (ISO).")
    until: str | None = Field(default=None, description="Only turns before (ISO).")
    as_of: str | None = Field(default=None, description="Evaluate as of this time (ISO).")
    half_life_days: float = 7.0
    recency_weight: float = 1.0
    time_weight: float = Field(
        default=DEFAULT_TIME_WEIGHT, ge=0.0, allow_inf_nan=False,
        description="Turns in a time the query names (\"in May 2023\", \"on 3 June\", "
                    "\"last week\") rank up to 1 + this many times higher, less with each "
                    "3 days outside it (0 reads no time from the query).")
    no_semantic: bool = False
    no_lexical: bool = False
    no_trigram: bool = False
    max_per_conversation: int | None = Field(default=None, ge=0)
    snippets: Literal["user", "assistant", "both", "none"] = "both"
    weights: dict[str, float] | None = None
    fusion: Literal["rrf", "rrf_score"] | None = None
    neighbour_weight: float = Field(
        default=DEFAULT_NEIGHBOUR_WEIGHT, ge=0.0, allow_inf_nan=False,
        description="How much a turn gains from a matching previous or next turn of its "
                    "conversation, as a share of that turn's fused value; a turn alone in its "
                    "conversation gains that share of its own (0 turns it off).")
    coverage_gain: float = Field(
        default=DEFAULT_COVERAGE_GAIN, ge=0.0, allow_inf_nan=False,
        description="Each lexical match votes with the lexical weight times the square of "
                    "this many times the share of the query's word weight the turn holds "
                    "(0 keeps the weight fixed).")
    min_relevance: float = Field(
        default=DEFAULT_MIN_RELEVANCE, ge=0.0, le=1.0, allow_inf_nan=False,
        description="Drop hits whose relevance is below this (0 keeps every hit). The default "
                    "returns no hit for a query nothing in the history matches.")
    agent: str | None = Field(default=None, description="Only conversations this agent "
                              "recorded (codex, claude-code, gemini-cli, ...).")
    app: str | None = Field(default=None, description="Only conversations of this app.")

    def to_request(self, principal: Principal) -> SearchRequest:
        """The SearchRequest these options make for a principal."""
        if self.roles is not None and self.role is not None:
            raise QueryError("give roles or role, not both (they are one option)")
        roles = self.roles or self.role or list(DEFAULT_SEARCH_ROLES)
        if isinstance(roles, str):
            roles = [roles]
        enabled = {"semantic": not self.no_semantic, "lexical": not self.no_lexical,
                   "trigram": not self.no_trigram}
        weights = dict(DEFAULT_WEIGHTS)
        weights.update(self.weights or {})
        return SearchRequest(
            query=self.query, principal=principal, scope=self.scope,
            # An end user naming another user is refused by the scope rules, not ignored.
            user_id=self.user if principal.analyst or self.user != principal.user_id else None,
            conversation_id=self.conversation, roles=tuple(roles),
            since=parse_time(self.since, "since"), until=parse_time(self.until, "until"),
            k=self.k, enabled=enabled, weights=weights, half_life_days=self.half_life_days,
            recency_weight=self.recency_weight, time_weight=self.time_weight,
            as_of=parse_time(self.as_of, "as_of"),
            max_per_conversation=self.max_per_conversation, snippets=self.snippets,
            fusion=FusionSettings(method=self.fusion or FusionSettings.method,
                                  neighbour_weight=self.neighbour_weight,
                                  coverage_gain=self.coverage_gain),
            min_relevance=self.min_relevance, agent=self.agent, app=self.app)


class QueryLine(QueryOptions):
    """A ``search --queries`` line: the options plus the principal they run as."""

    tenant: str | None = None
    analyst: bool = False

    def principal(self) -> Principal:
        """The principal the line names."""
        return principal_from(self.tenant, self.user, self.analyst)

    @classmethod
    def parse(cls, options: dict[str, Any]) -> QueryLine:
        """A line from option names (the CLI's long options, underscored); QueryError
        naming the bad fields otherwise."""
        try:
            return cls.model_validate(options)
        except ValidationError as exc:
            raise QueryError(describe_validation_error(exc)) from None


def principal_from(tenant: str | None, user: str | None, analyst: bool) -> Principal:
    """The principal a command acts as."""
    if not tenant:
        raise QueryError("--tenant is required")
    if not analyst and not user:
        raise QueryError("--user is required (or --analyst to act as an analyst)")
    return Principal(tenant=tenant, user_id=user, analyst=analyst)


class NamedTimeAnswer(BaseModel):
    """A time the query named, whose turns the search lifted: the words and their range."""

    phrase: str = Field(description="The query's words, as written.")
    start: IsoInstant = Field(description="The range's first instant (UTC).")
    end: IsoInstant = Field(description="The instant after the range (UTC).")


class SearchHits(BaseModel):
    """Matched turns best first, warnings about freshness and the floor, and the times the
    query named: the MCP search tool's answer, and the body of :class:`SearchAnswer`."""

    hits: list[Hit]  # the search's own hits: one definition (lake.search.request)
    warnings: list[str] = Field(default_factory=list)
    named_times: list[NamedTimeAnswer] = Field(
        default_factory=list, description="Times the query names; turns in them rank higher.")

    @classmethod
    def of(cls, result: SearchResult) -> SearchHits:
        """The answer of a search result."""
        return cls(**_answer_fields(result))


class SearchAnswer(SearchHits):
    """A search's answer: ``search --json`` and ``POST /v1/search``."""

    id: str | int | None = None

    @classmethod
    def of(cls, result: SearchResult, qid: str | int | None = None) -> SearchAnswer:
        """The answer of a search result, echoing the query's ``qid``."""
        return cls(id=qid, **_answer_fields(result))

    def to_json(self) -> dict[str, Any]:
        """JSON-ready fields (``id`` only when there is one)."""
        return self.model_dump(mode="json", exclude={"id"} if self.id is None else None)


def _answer_fields(result: SearchResult) -> dict[str, Any]:
    """The fields of a search result's answer."""
    return {"hits": list(result.hits), "warnings": result.warnings,
            "named_times": [NamedTimeAnswer(phrase=n.phrase, start=n.range.start,
                                            end=n.range.end) for n in result.named_times]}


class CatalogTurnModel(BaseModel):
    """One turn in its conversation's order."""

    tenant: str
    user_id: str
    conversation_id: str
    turn_id: str
    ordinal: int
    started_at: str
    ended_at: str
    writer: str
    first_user_message: str
    last_completion: str


class CatalogAnswer(BaseModel):
    """``catalog --json`` and ``GET /v1/catalog`` (one page of it)."""

    turns: list[CatalogTurnModel]
    next_cursor: str | None = Field(default=None, description=(
        "Pass as `cursor` for the next page; absent on the last page."))


class ConversationsAnswer(BaseModel):
    """``GET /v1/conversations``: one page, most recent activity first."""

    conversations: list[ConversationEntry]
    next_cursor: str | None = Field(default=None, description=(
        "Pass as `cursor` for the next page; absent on the last page."))


class TurnOutcome(BaseModel):
    """What became of one turn of a recording request."""

    index: int = Field(description=(
        "0-based position of the turn in the request: in `turns`, or among the NDJSON "
        "body's non-blank lines (a reason that names a line gives its physical line "
        "number, from 1, blank lines counted)."))
    status: TurnStatus
    conversation_id: str | None = None
    turn_id: str | None = None
    reason: str | None = None
    field: str | None = Field(default=None, description="Path of the first bad field.")


class RecordAnswer(BaseModel):
    """``POST /v1/turns``: sent once every accepted turn is durable."""

    accepted: int
    duplicates: int
    rejected: int
    turns: list[TurnOutcome]


class ErasureAnswer(BaseModel):
    """``DELETE /v1/conversations/{c}`` and ``DELETE /v1/users/{u}``: the erase job, what it
    planned to remove (counts) and what it removed (rows deleted per table)."""

    job_id: str
    counts: dict[str, int]
    deleted: dict[str, int]


class PullBody(BaseModel):
    """``POST /v1/pull``: what to pull, and where below the server's workspace."""

    model_config = ConfigDict(extra="forbid")
    targets: list[str] = Field(min_length=1, description=(
        "conv:fi: refs, or turns as 'CONVERSATION/TURN' (all of a turn's files and "
        "attachments)."))
    into: str = Field("", description="A folder relative to the server's workspace "
                                      "(empty: the workspace itself).")


class PullAnswer(BaseModel):
    """What the pull did per file; ``ok`` is true when every file with bytes was pulled.
    ``into`` and ``manifest`` are relative to the server's workspace (its own paths are
    not the caller's business)."""

    into: str
    manifest: str
    ok: bool
    items: list[PullItem]

    @classmethod
    def of(cls, into: str, ok: bool, items: list[PullItem]) -> PullAnswer:
        """The answer of a pull into ``into`` (relative to the workspace)."""
        folder = into.strip("/")
        return cls(into=folder, manifest=f"{folder}/{PULL_MANIFEST}".lstrip("/"), ok=ok,
                   items=items)


class ErrorDetail(BaseModel):
    """What went wrong, and where."""

    code: str
    message: str
    field: str | None = None


class ErrorAnswer(BaseModel):
    """The one error shape of the service."""

    error: ErrorDetail
