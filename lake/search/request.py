"""Typed search requests and answers, shared by the CLI, the workbench and agents."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AliasChoices, Field, PlainSerializer, TypeAdapter

from lake.search.access import Principal, Scope
from lake.search.defaults import (
    DEFAULT_COVERAGE_GAIN,
    DEFAULT_K,
    DEFAULT_MIN_RELEVANCE,
    DEFAULT_NEIGHBOUR_WEIGHT,
    DEFAULT_SEARCH_ROLES,
    DEFAULT_TIME_WEIGHT,
    FusionMethod,
)

if TYPE_CHECKING:  # the engine's types; this module stays light for the client (turnlake)
    from lake.search.named_time import NamedTime

# An instant in the JSON contract: ISO 8601 as datetime.isoformat spells it ("+00:00").
IsoInstant = Annotated[datetime, PlainSerializer(datetime.isoformat, return_type=str),
                       Field(description="ISO 8601")]
Generator = Literal["semantic", "lexical", "trigram"]
GENERATORS: tuple[Generator, ...] = ("semantic", "lexical", "trigram")
SnippetChoice = Literal["user", "assistant", "both", "none"]
SNIPPET_CHARS = 500

# Default RRF weight per generator. The dense arm always returns its `depth` nearest rows,
# related or not, while the lexical arm returns only rows that share a content word with the
# query, so at equal weights the dense arm's guesses outvote lexical matches (LoCoMo, minimal
# records: fused recall@5 .587, below the lexical arm alone at .612). At half a vote, and
# before rrf_score's bonus, a turn both arms place in their top 30 still outranks the lexical
# arm's first turn, so agreement wins and the dense arm still settles the lexical arm's close
# calls; but a turn that only the dense arm ranks first now counts like the lexical arm's 62nd
# (fused recall@5 .618 minimal, .706 rich; the dense arm's weight anywhere from 0.4 to 0.7
# gives the same within .01). Trigram, whose list holds only near-literal matches above its
# threshold, also counts half.
DEFAULT_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {"semantic": 0.5, "lexical": 1.0, "trigram": 0.5})


@dataclass(frozen=True)
class FusionSettings:
    """How the generators' turn lists are fused (see lake.search.fusion.fuse): ``method``
    "rrf" ranks by reciprocal rank alone, "rrf_score" adds each list's floored z-scores
    weighted by ``score_factor``; ``k`` is RRF's rank offset. ``neighbour_weight`` lifts a
    turn by that share of its best-matching neighbour turn's value (lake.search.neighbours;
    0 turns the smoothing off). ``coverage_gain`` scales the lexical arm's vote for each turn by
    the square of that many times the share of the query the turn holds (lake.search.coverage;
    0 keeps the weight as given)."""

    method: FusionMethod = "rrf_score"
    k: int = DEFAULT_K  # defined once, in lake.search.fusion
    score_factor: float = 1.0
    zscore_floor: float = 1.0
    neighbour_weight: float = DEFAULT_NEIGHBOUR_WEIGHT
    coverage_gain: float = DEFAULT_COVERAGE_GAIN


@dataclass(frozen=True)
class SearchRequest:
    """One conversation search. Defaults follow the spec (7-day half-life, k=10, RRF k=60)."""

    query: str
    principal: Principal
    scope: Scope = "user"
    user_id: str | None = None
    conversation_id: str | None = None
    roles: tuple[str, ...] = DEFAULT_SEARCH_ROLES
    since: datetime | None = None
    until: datetime | None = None
    k: int = 10
    enabled: Mapping[str, bool] = field(
        default_factory=lambda: {"semantic": True, "lexical": True, "trigram": True})
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    half_life_days: float = 7.0
    recency_weight: float = 1.0
    # Turns in a time the query names ("in May 2023", "last week") are lifted by up to
    # 1 + time_weight (lake.search.named_time); 0 reads no time from the query.
    time_weight: float = DEFAULT_TIME_WEIGHT
    as_of: datetime | None = None
    max_per_conversation: int | None = None
    snippets: SnippetChoice = "both"
    trigram_threshold: float = 0.5
    fusion: FusionSettings = field(default_factory=FusionSettings)
    depth: int = 100
    # Hits whose relevance (lake.search.relevance) is below this are dropped; 0 keeps all.
    min_relevance: float = DEFAULT_MIN_RELEVANCE
    # Only turns of conversations this agent (``codex``, ``claude-code``...) or app recorded,
    # as their timelines say; None: any.
    agent: str | None = None
    app: str | None = None


@dataclass(frozen=True)
class GeneratorRank:
    """A turn's best row in one generator: its 1-based rank and the generator's score."""

    rank: int
    score: float


@dataclass(frozen=True)
class Hit:
    """One matched turn, with the evidence of how it scored."""

    tenant: str
    user_id: str
    conversation_id: str
    turn_id: str
    turn_at: IsoInstant
    role: str
    text: str
    row_id: str
    ranks: Mapping[str, GeneratorRank | None]
    # Named "rrf" until 2026-12: a hit written so then still reads (CHANGELOG).
    fused: Annotated[float, Field(
        validation_alias=AliasChoices("fused", "rrf"),
        description="The turn's fused score: reciprocal-rank fusion of the arms' rankings, "
                    "with rrf_score's bonus when the request fuses so (the default); "
                    "score = fused × lift.")]
    lift: float
    score: float
    relevance: Annotated[float, Field(
        description="How likely the turn is a real match, 0 to 1; hits below the request's "
                    "min_relevance are left out.")]
    snippets: Mapping[str, str]
    address: Annotated[str | None, Field(
        description="The address of the matched row (conv:so:, conv:ws: or conv:su: as its "
                    "role says), with its turn's edition; resolve it with get_ref or "
                    "GET /v1/refs/{ref}. Null when the turn is no longer recorded.")] = None
    turn_address: Annotated[str | None, Field(
        description="The address of the turn's record (conv:ar:...record@edition).")] = None
    agent: Annotated[str | None, Field(
        description="The agent that recorded the turn (claude-code, codex, gemini-cli, ...).")
    ] = None
    app: Annotated[str | None, Field(description="The app the turn was recorded in.")] = None

    def to_json(self) -> dict[str, Any]:
        """The hit as the JSON contract spells it (``search --json``, ``POST /v1/search``,
        the MCP tool's structured output: the same pydantic schema documents all three)."""
        out: dict[str, Any] = _HIT_JSON.dump_python(self, mode="json")
        return out


_HIT_JSON: TypeAdapter[Hit] = TypeAdapter(Hit)


@dataclass(frozen=True)
class SearchResult:
    """The answer: hits best first, plus anything the caller must know about freshness."""

    hits: list[Hit]
    stale_partitions: list[str] = field(default_factory=list)
    unindexed_partitions: list[str] = field(default_factory=list)
    semantic_error: str | None = None
    timings_ms: Mapping[str, float] = field(default_factory=dict)
    # Fused turns left out for a relevance below the request's floor (``floor``).
    below_floor: int = 0
    floor: float = 0.0
    # Partitions whose vectors come from another model than the query's (``query_model``):
    # searched without their semantic arm.
    foreign_model_partitions: list[str] = field(default_factory=list)
    query_model: str | None = None
    # The times the query names, whose turns were lifted (lake.search.named_time).
    named_times: list[NamedTime] = field(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """Human-readable notes about stale or missing indexes and degraded generators."""
        notes = []
        if self.stale_partitions:
            notes.append("index is stale for " + ", ".join(self.stale_partitions)
                         + ": newer rows are not searched yet (run `turnlake index build`)")
        if self.unindexed_partitions:
            notes.append("no index yet for " + ", ".join(self.unindexed_partitions)
                         + " (run `turnlake index build`)")
        if self.foreign_model_partitions:
            notes.append("the index of " + ", ".join(self.foreign_model_partitions)
                         + f" holds vectors of another embedding model than the query's "
                         f"({self.query_model}): searched by words only there (run "
                         "`turnlake embed --backfill --reembed`, then `turnlake index build`)")
        if self.semantic_error:
            notes.append(f"semantic search unavailable: {self.semantic_error}")
        if self.floor_note:
            notes.append(self.floor_note)
        return notes

    @property
    def floor_note(self) -> str | None:
        """Why there is no hit when every candidate fell below the relevance floor."""
        if self.hits or not self.below_floor:
            return None
        return (f"no turn reached the relevance floor {self.floor:g}: {self.below_floor} "
                "weaker candidate(s) left out (a lower min relevance shows them)")
