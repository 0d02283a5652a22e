"""The MCP server: conversation search, the turn catalog, turn materialization and workspace
pull as tools an agent calls (the `mcp` SDK's FastMCP).

A thin adapter, like the CLI: every tool calls the lake's services (one warm
:class:`SearchService` per server) as the server's principal. Identity never comes from tool
arguments: it is fixed when the server starts (``turnlake mcp --key KEY``, stdio), or, over
streamable HTTP, taken per request from the bearer key (:func:`mcp_http_app`).

Refusals do not tell whether an object exists: another user's conversation or turn gets the
same answer as a missing one.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import anyio
from anyio import to_thread
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from lake.errors import AccessDenied, QueryError, TurnlakeError
from lake.keys import KeyPrincipal, KeyStore
from lake.resolver import RefResolver, ResolvedFile, ResolvedRecord
from lake.search.access import Principal, Scope
from lake.search.catalog import CatalogTurn, TurnCatalog
from lake.search.materialize import MaterializedTurn, TurnMaterializer
from lake.search.relevance import DEFAULT_MIN_RELEVANCE
from lake.search.request import GeneratorRank, Hit, IsoInstant, SearchRequest, SnippetChoice
from lake.search.service import SearchService
from lake.search.when import OrdinalLookup, resolve_when
from lake.settings import Settings
from lake.store import LakeStore
from lake.tables import DEFAULT_SEARCH_ROLES
from lake.workspace import WorkspacePuller
from pipeline.contract import NamedTimeAnswer, PullAnswer, SearchHits

Role = Literal["user", "analyst", "recorder", "admin"]
SearchRole = Literal["user", "assistant", "summary", "anchor", "note", "attachment"]
MAX_K = 50
LOOPBACK_HOSTS: tuple[str, ...] = ("127.0.0.1:*", "localhost:*", "[::1]:*")
_T = TypeVar("_T")

INSTRUCTIONS = (
    "turnlake holds this person's recorded conversations with agents: every turn's prompts, "
    "answers, summaries, anchors, notes, attachments and hosted files. Use "
    "search_conversations to find earlier turns by topic or wording, list_turns for questions "
    "of position or time ('the 3rd turn', 'yesterday'), get_turn to read one turn whole with "
    "its file refs, get_ref to follow a conv:* address (from a hit, a turn or a text), and "
    "pull_files to copy a turn's files into the workspace. What you can see is fixed by the "
    "key this server runs with.")
# The most of a file get_ref returns inline; pull_files copies larger ones.
MAX_INLINE_BYTES = 1 << 20


# -- structured outputs ------------------------------------------------------------------------

class Scoring(BaseModel):
    """How a hit scored: each generator's rank and score, the fused value, the recency and
    time lift, the final score, and the row that matched best."""

    row_id: str
    ranks: Mapping[str, GeneratorRank | None]
    fused: float
    lift: float
    score: float


class FoundTurn(BaseModel):
    """One matched turn: where it is, when, its best matching text, and how likely it is a
    real match (``scoring`` only when the search asked to ``explain``)."""

    conversation_id: str
    turn_id: str
    user_id: str
    turn_at: IsoInstant
    role: str
    text: str
    relevance: float
    snippets: Mapping[str, str]
    address: str | None = Field(default=None, description=(
        "The matched row's conv:* address: get_ref follows it."))
    turn_address: str | None = Field(default=None, description=(
        "The turn record's conv:ar: address: get_ref follows it."))
    agent: str | None = Field(default=None, description="The agent that recorded the turn.")
    app: str | None = None
    scoring: Scoring | None = None

    @classmethod
    def of(cls, hit: Hit, explain: bool) -> FoundTurn:
        """The tool's hit of a search hit."""
        return cls(conversation_id=hit.conversation_id, turn_id=hit.turn_id,
                   user_id=hit.user_id, turn_at=hit.turn_at, role=hit.role, text=hit.text,
                   relevance=hit.relevance, snippets=hit.snippets, address=hit.address,
                   turn_address=hit.turn_address, agent=hit.agent, app=hit.app,
                   scoring=Scoring(
                       row_id=hit.row_id, ranks=hit.ranks, fused=hit.fused, lift=hit.lift,
                       score=hit.score) if explain else None)


class FoundTurns(BaseModel):
    """search_conversations' answer: matched turns best first, warnings about freshness,
    and the times the query named (their turns rank higher)."""

    hits: list[FoundTurn]
    warnings: list[str] = Field(default_factory=list)
    named_times: list[NamedTimeAnswer] = Field(default_factory=list)

    @classmethod
    def of(cls, hits: SearchHits, explain: bool) -> FoundTurns:
        """The tool's answer of a search's."""
        return cls(hits=[FoundTurn.of(h, explain) for h in hits.hits], warnings=hits.warnings,
                   named_times=hits.named_times)


class TurnList(BaseModel):
    """Turns in conversation order (``ordinal`` 1 = first turn of its conversation)."""

    turns: list[CatalogTurn]


class TurnAnswer(BaseModel):
    """One turn rebuilt from its TurnLog, with file cards (``files[].ref`` are conv:fi: refs
    that pull_files accepts)."""

    turn: MaterializedTurn


class FileContent(BaseModel):
    """A hosted file get_ref resolved: its card, and its bytes as text when they are UTF-8,
    else base64 (up to MAX_INLINE_BYTES; larger files: pull_files)."""

    ref: str
    name: str
    mime: str
    size: int
    sha256: str
    description: str | None
    expires_at: datetime
    text: str | None = None
    content_b64: str | None = None
    truncated: bool = Field(default=False, description="The file is larger than this tool "
                            "returns; pull_files copies it whole.")


class RefAnswer(BaseModel):
    """What an address names: ``record`` for a record, step, search row or event, ``file``
    for a conv:fi: ref."""

    record: ResolvedRecord | None = None
    file: FileContent | None = None


def turnlake_version() -> str:
    """The installed turnlake's version."""
    try:
        return version("turnlake")
    except PackageNotFoundError:  # a source tree without an install
        return "0+unknown"


# -- identity ----------------------------------------------------------------------------------

def resolve_key(settings: Settings, key: str) -> Principal:
    """The read principal of an API key (``turnlake keys create``): AccessDenied for an
    unknown or revoked key and for a role that may not read (a recorder's)."""
    return KeyStore(settings.lake, s3=settings.s3).authenticate(key).reader()


PrincipalSource = Callable[[Context[Any, Any, Any]], Principal]
PRINCIPAL_STATE = "turnlake_principal"  # where mcp_http_app leaves a request's principal


def fixed_principal(principal: Principal) -> PrincipalSource:
    """Every call as one principal (stdio: the key given at start)."""
    return lambda _ctx: principal


def request_principal(ctx: Context[Any, Any, Any]) -> Principal:
    """The principal :func:`mcp_http_app` authenticated for the HTTP request of this call."""
    request = ctx.request_context.request
    state = getattr(request, "scope", {}).get("state", {}) if request is not None else {}
    principal = state.get(PRINCIPAL_STATE)
    if not isinstance(principal, Principal):
        raise AccessDenied("this call carries no authenticated key")
    return principal


# -- the server --------------------------------------------------------------------------------

@dataclass
class _Lake:
    """The lake-side services one server keeps warm; the limiter runs one call at a time (the
    services cache opened indexes and the model without locks of their own)."""

    search: SearchService
    catalog: TurnCatalog
    materializer: TurnMaterializer
    puller: WorkspacePuller
    limiter: anyio.CapacityLimiter
    before_reads: Callable[[], None]  # waits until what the host answered is committed

    async def run(self, work: Callable[[], _T]) -> _T:
        """Run blocking lake work off the event loop, one call at a time."""
        try:
            return await to_thread.run_sync(work, limiter=self.limiter)
        except TurnlakeError as exc:
            raise ToolError(str(exc)) from exc

    async def read(self, work: Callable[[], _T]) -> _T:
        """:meth:`run` once the recordings the host answered are committed (search needs no
        such wait: it may lag them by a moment)."""
        def committed() -> _T:
            self.before_reads()
            return work()
        return await self.run(committed)


def create_mcp_server(settings: Settings, principal: Principal | PrincipalSource, *,
                      service: SearchService | None = None, workspace: Path | None = None,
                      http_path: str = "/mcp",
                      http_hosts: Sequence[str] = LOOPBACK_HOSTS,
                      before_reads: Callable[[], None] = lambda: None) -> FastMCP:
    """The MCP server over one lake.

    ``principal`` is a fixed Principal or a function of the call's context (see
    :func:`request_principal`). ``workspace`` is the folder pull_files may write into (the
    tool is absent without one). ``service`` lets a host share its warm SearchService.
    ``http_hosts``: the Host headers streamable HTTP accepts (``host:port``, ``*`` for any
    port), the SDK's guard against DNS rebinding; add the names a served host is reached by.
    ``before_reads`` runs before every tool but search reads the lake: a host that answers
    recordings before committing them waits there for the commits (GroupWriter.flush).
    """
    from lake.embedding.factory import embedder_from

    who = fixed_principal(principal) if isinstance(principal, Principal) else principal
    store = LakeStore(settings.lake)
    lake = _Lake(
        search=service or SearchService(store, embedder=lambda: embedder_from(
            settings, "query")),
        catalog=TurnCatalog(store), materializer=TurnMaterializer(store),
        puller=WorkspacePuller(store), limiter=anyio.CapacityLimiter(1),
        before_reads=before_reads)
    security = TransportSecuritySettings(
        allowed_hosts=list(http_hosts),
        allowed_origins=[f"http://{h}" for h in http_hosts] + [f"https://{h}" for h in http_hosts])
    # At INFO the SDK logs every request to stderr, which agent hosts show as noise.
    server = FastMCP("turnlake", instructions=INSTRUCTIONS, streamable_http_path=http_path,
                     transport_security=security, log_level="WARNING")
    # serverInfo.version: turnlake's, not the SDK's (FastMCP takes no version of its own).
    server._mcp_server.version = turnlake_version()
    read_only = ToolAnnotations(readOnlyHint=True, openWorldHint=False)

    @server.tool(annotations=read_only, structured_output=True)
    async def search_conversations(
        ctx: Context[Any, Any, Any],
        query: Annotated[str, Field(min_length=1, description=(
            "What to look for, in the words the conversation would have used: a topic, an "
            "error message, a file name, an identifier. Quote a phrase to match it exactly. "
            "Identifiers and numbers asked alone (INC-3147, #4560, several at once) match "
            "only turns that hold one of them whole, whatever separates its parts (INC3147 "
            "matches INC-3147): INC-9999 does not match INC-9124."))],
        scope: Annotated[Scope, Field(description=(
            "'user' (default): all of this person's conversations; 'conversation': only the "
            "one given in `conversation`; 'tenant': every user's (analyst keys only)."))
        ] = "user",
        conversation: Annotated[str | None, Field(description=(
            "Conversation id: required with scope 'conversation', else narrows the search."))
        ] = None,
        roles: Annotated[list[SearchRole] | None, Field(description=(
            "Which texts to search; default user, assistant, summary, anchor, attachment. "
            "'note' holds the agent's private notes."))] = None,
        since: Annotated[datetime | None, Field(description=(
            "Only turns that started at or after this ISO 8601 time (UTC if no offset)."))
        ] = None,
        until: Annotated[datetime | None, Field(description=(
            "Only turns that started before this ISO 8601 time (UTC if no offset)."))] = None,
        k: Annotated[int, Field(ge=1, le=MAX_K, description="How many turns to return.")
                     ] = 10,
        snippets: Annotated[SnippetChoice, Field(description=(
            "Which sides of each matched turn to include as snippets: 'both' (default), "
            "'user', 'assistant' or 'none'."))] = "both",
        min_relevance: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False, description=(
            "Leave out hits whose relevance (0-1, on every hit) is below this. The default "
            "answers no hits when nothing in the history matches; an empty answer means "
            "there is nothing to find, not that the search failed. 0 returns the nearest "
            "turns whatever they are."))] = DEFAULT_MIN_RELEVANCE,
        agent: Annotated[str | None, Field(description=(
            "Only conversations this agent recorded: 'claude-code', 'codex', 'gemini-cli', "
            "'copilot-cli', 'aider', 'claude-ai', 'chatgpt'."))] = None,
        app: Annotated[str | None, Field(description=(
            "Only conversations recorded in this app."))] = None,
        user: Annotated[str | None, Field(description=(
            "Analyst keys: the user whose conversations to search (needed with scope "
            "'user'). A user's own key always searches its own and needs none."))] = None,
        explain: Annotated[bool, Field(description=(
            "Add each hit's scoring (generator ranks and scores, fused value, lift): for "
            "debugging a ranking, not needed to use the hits."))] = False,
    ) -> FoundTurns:
        """Search earlier conversations: hybrid semantic + keyword + fuzzy search, fused and
        lifted by recency. A time written in the query ('in March 2026', 'on 3 June',
        'last week') ranks that time's turns higher; named_times says how it was read. Each
        hit is one turn (conversation_id, turn_id, when, the best matching text and its role,
        user/assistant snippets). Follow up with get_turn for the whole turn, or pull_files
        for its files."""
        principal = who(ctx)
        request = SearchRequest(
            query=query, principal=principal, scope=scope, conversation_id=conversation,
            # An end user naming another user is refused by the scope rules, not ignored.
            user_id=user if principal.analyst or user != principal.user_id else None,
            roles=tuple(roles or DEFAULT_SEARCH_ROLES), since=_utc(since), until=_utc(until),
            k=k, snippets=snippets, min_relevance=min_relevance, agent=agent, app=app)
        result = await lake.run(lambda: lake.search.search(request))
        return FoundTurns.of(SearchHits.of(result), explain)

    @server.tool(annotations=read_only, structured_output=True)
    async def list_turns(
        ctx: Context[Any, Any, Any],
        conversation: Annotated[str | None, Field(description=(
            "Conversation id. Alone: every turn of it, in order."))] = None,
        ordinal: Annotated[int | None, Field(description=(
            "With `conversation`: the Nth turn (1 = first, -1 = last, -2 = second to last)."))
        ] = None,
        when: Annotated[str | None, Field(description=(
            "A phrase: 'today', 'yesterday', 'last week', 'in March 2026', '2026-03-14', "
            "'last 3 days', or a position ('3rd turn', 'the last turn': needs "
            "`conversation`)."))] = None,
        user: Annotated[str | None, Field(description=(
            "Analyst keys, with `when`: only this user's turns."))] = None,
    ) -> TurnList:
        """List turns by position or time: a conversation's turns in order, its Nth turn, or
        the turns a time phrase covers (across conversations when no conversation is given).
        Each turn has its ordinal, start time and the start of its prompt and answer."""
        principal = who(ctx)

        def nth(position: int) -> list[CatalogTurn]:
            assert conversation is not None
            return [_unseen(lambda: lake.catalog.nth(principal, conversation, position))]

        def work() -> list[CatalogTurn]:
            if when is not None:
                # A phrase that does not parse keeps its own message; a position is looked
                # up like `ordinal`.
                lookup = resolve_when(when, datetime.now(UTC))
                if isinstance(lookup, OrdinalLookup) and conversation is not None:
                    return nth(lookup.ordinal)
                return lake.catalog.resolve(principal, when, conversation_id=conversation,
                                            user_id=user)
            if conversation is None:
                raise QueryError("give `conversation` (optionally with `ordinal`) or `when`")
            if ordinal is not None:
                return nth(ordinal)
            try:
                return lake.catalog.turns(principal, conversation)
            except AccessDenied:
                return []  # another user's conversation looks like one that does not exist

        try:
            return TurnList(turns=await lake.read(work))
        except _Unseen:
            raise ToolError(f"conversation {conversation} has no such turn that "
                            f"{principal.describe()} may read; list_turns with only "
                            "`conversation` shows the turns there are") from None

    @server.tool(annotations=read_only, structured_output=True)
    async def get_turn(
        ctx: Context[Any, Any, Any],
        conversation: Annotated[str, Field(description="Conversation id (from a hit).")],
        turn: Annotated[str, Field(description="Turn id (from a hit or list_turns).")],
    ) -> TurnAnswer:
        """Read one turn whole, rebuilt from its record: every user submission, the final
        answer, attachments, hosted files (with conv:fi: refs, type, size, expiry), tool
        steps, citations, summary, anchors and notes."""
        principal = who(ctx)
        try:
            shown = await lake.read(lambda: _unseen(
                lambda: lake.materializer.turn(principal, conversation, turn)))
        except _Unseen:
            raise ToolError(f"no live turn {conversation}/{turn} that {principal.describe()} "
                            "may read") from None
        return TurnAnswer(turn=shown)

    @server.tool(annotations=read_only, structured_output=True)
    async def get_ref(
        ctx: Context[Any, Any, Any],
        ref: Annotated[str, Field(min_length=1, description=(
            "A conv:* address: a hit's address or turn_address, one of get_turn's addresses, "
            "or a ref written in a turn's text (conv:fi: files, conv:ar: records, conv:tc: "
            "steps, conv:so:/ws:/su: search rows, conv:ev: events)."))],
    ) -> RefAnswer:
        """Follow an address to its object: the turn record or a part of it, a tool step, a
        search row, a recorded event (as JSON), or a hosted file (text or base64). Another
        user's object and a missing one get the same answer; an expired one says so."""
        principal = who(ctx)
        resolved = await lake.read(
            lambda: RefResolver(lake.materializer).resolve(principal, ref))
        if isinstance(resolved, ResolvedRecord):
            return RefAnswer(record=resolved)
        return RefAnswer(file=_file_content(resolved))

    if workspace is not None:
        root = workspace

        @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False,
                                                 idempotentHint=True, openWorldHint=False),
                     structured_output=True)
        async def pull_files(
            ctx: Context[Any, Any, Any],
            targets: Annotated[list[str], Field(min_length=1, description=(
                "conv:fi: refs (as found in answers, summaries or get_turn's files), or "
                "turns as 'CONVERSATION/TURN' to pull all of a turn's files and "
                "attachments."))],
            into: Annotated[str, Field(description=(
                "A folder relative to the workspace (empty: the workspace itself)."))] = "",
        ) -> PullAnswer:
            """Copy hosted files into the workspace: DIR/files/<path> for a turn's files,
            DIR/user.attachments/<name> for the user's attachments, and a manifest
            DIR/.turnlake-pull.json. Never overwrites a file it did not write. Each item
            says pulled, unchanged, expired, refused, conflict, unsafe, not_hosted or
            invalid; the others are still pulled."""
            principal = who(ctx)

            def work() -> PullAnswer:
                report = lake.puller.pull(principal, targets, into, inside=root)
                return PullAnswer.of(into, report.ok, report.items)

            return await lake.read(work)

    return server


def _file_content(resolved: ResolvedFile) -> FileContent:
    """A file's card with its bytes inline: text when UTF-8, else base64."""
    card, data = resolved.card, resolved.data
    head = data[:MAX_INLINE_BYTES]
    try:
        inline: dict[str, str] = {"text": head.decode("utf-8")}
    except UnicodeDecodeError:
        inline = {"content_b64": base64.b64encode(head).decode()}
    return FileContent(ref=card.ref, name=card.name, mime=card.mime, size=card.size,
                       sha256=card.sha256, description=card.description,
                       expires_at=card.expires_at, truncated=len(data) > len(head), **inline)


class _Unseen(Exception):
    """A turn or conversation that is missing or not the principal's (one answer for both)."""


def _unseen(lookup: Callable[[], _T]) -> _T:
    """Run the lookup of one named turn; "not yours" and "not there" (QueryError from a lookup
    whose ids are valid) become one indistinguishable error."""
    try:
        return lookup()
    except (AccessDenied, QueryError):
        raise _Unseen() from None


def _utc(value: datetime | None) -> datetime | None:
    """A time without an offset is UTC (as on the command line)."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


# -- streamable HTTP -----------------------------------------------------------------------------

Scope_ = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope_, Receive, Send], Awaitable[None]]


def mcp_http_app(settings: Settings, authenticate: Callable[[str], KeyPrincipal], *,
                 service: SearchService | None = None, path: str = "/mcp",
                 hosts: Sequence[str] = LOOPBACK_HOSTS,
                 workspace: Path | None = None,
                 before_reads: Callable[[], None] = lambda: None) -> tuple[FastMCP, ASGIApp]:
    """The MCP server as a streamable-HTTP ASGI app with a bearer key per request.

    ``authenticate`` maps a key to its tenant, role and user (``lake.keys.authenticate`` bound
    to the lake) and raises TurnlakeError for a key it does not know. Answers 401 without
    ``Authorization: Bearer KEY`` or with an unknown key, 403 for a key whose role may not
    read (a recorder's); otherwise the tools act as the key's principal.

    Returns the server and the app. A host that mounts the app into its own must run
    ``server.session_manager.run()`` in its lifespan (the app's own lifespan does that when it
    is served alone). ``path`` is where the app answers inside itself: the default when it is
    served alone or routed as ``Route("/mcp", app)``, ``"/"`` for ``Mount("/mcp", app)``.
    ``hosts``, ``workspace`` (the folder pull_files writes into; no tool without one) and
    ``before_reads`` as in :func:`create_mcp_server`.
    """
    server = create_mcp_server(settings, request_principal, service=service, http_path=path,
                               http_hosts=hosts, workspace=workspace, before_reads=before_reads)
    inner = server.streamable_http_app()
    for name in _SDK_HTTP_LOGGERS:
        sdk_log = logging.getLogger(name)
        if not any(isinstance(f, _QuietDisconnects) for f in sdk_log.filters):
            sdk_log.addFilter(_QuietDisconnects())

    async def app(scope: Scope_, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await inner(scope, receive, send)
            return
        key = _bearer(scope)
        try:
            if key is None:
                raise AccessDenied("send Authorization: Bearer KEY")
            found = await to_thread.run_sync(authenticate, key)
        except TurnlakeError as exc:
            await _refuse(send, 401, "unauthorized", str(exc))
            return
        try:
            principal = found.reader()
        except TurnlakeError as exc:
            await _refuse(send, 403, "forbidden", str(exc))
            return
        scope.setdefault("state", {})[PRINCIPAL_STATE] = principal
        await inner(scope, receive, send)

    return server, app


_SDK_HTTP_LOGGERS = ("mcp.server.streamable_http", "mcp.server.streamable_http_manager")
_GONE = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)


class _QuietDisconnects(logging.Filter):
    """Drops the SDK's traceback of a client that disconnected (a stream closed under a
    writer): a client leaving is no error of the server's, and each one logged ~40 lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a record whose exception is a closed stream."""
        exc = record.exc_info[1] if record.exc_info else None
        return not (exc is not None and _is_disconnect(exc))


def _is_disconnect(exc: BaseException) -> bool:
    if isinstance(exc, _GONE):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_disconnect(e) for e in exc.exceptions)
    return exc.__cause__ is not None and _is_disconnect(exc.__cause__)


def _bearer(scope: Scope_) -> str | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            kind, _, key = value.decode("latin-1").partition(" ")
            return key.strip() or None if kind.lower() == "bearer" else None
    return None


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    """The error answer in the service's one shape, ``{"error": {"code", "message"}}``."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
