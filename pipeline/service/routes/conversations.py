"""Conversations: the catalog, the list, one turn, and erasing (admin).

An end user's key is refused the same way whether a conversation or turn is another user's
or does not exist, so a refusal never tells which; an analyst's reads never leave its tenant,
where another tenant's objects are as absent as missing ones.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import TypeAdapter

from lake.answers import ConversationEntry
from lake.deletion.target import ErasureTarget
from lake.errors import AccessDenied, QueryError, RefNotFound
from lake.search.access import Principal
from lake.search.catalog import CatalogTurn
from lake.search.materialize import MaterializedTurn
from pipeline.contract import (
    CatalogAnswer,
    CatalogTurnModel,
    ConversationsAnswer,
    ErasureAnswer,
    parse_time,
)
from pipeline.retention import erase
from pipeline.service.auth import Eraser, Reader
from pipeline.service.context import ServiceContext, committed_context, context_of
from pipeline.service.errors import error_responses
from pipeline.service.paging import DEFAULT_LIMIT, Cursor, Limit, page
from pipeline.service.spool import settler

router = APIRouter(tags=["conversations"])
_TURN_JSON: TypeAdapter[MaterializedTurn] = TypeAdapter(MaterializedTurn)
_ERRORS = error_responses(400, 403, 404)
AsOf = Annotated[str | None, Query(description="Evaluate as of this time (ISO 8601).")]


def refused(principal: Principal, what: str) -> AccessDenied:
    """The one refusal of an end user reaching past its own data."""
    return AccessDenied(f"{principal.describe()} may not read {what}")


def _conversation(ctx: ServiceContext, principal: Principal, conversation: str,
                  as_of: str | None) -> list[CatalogTurn]:
    """A conversation's turns; an end user is refused alike when it is not theirs or none."""
    try:
        turns = ctx.catalog.turns(principal, conversation, as_of=parse_time(as_of, "as_of"))
    except AccessDenied:
        turns = []
    if not turns and not principal.analyst:
        raise refused(principal, f"conversation {conversation}")
    return turns


@router.get("/v1/catalog", response_model=CatalogAnswer, responses=_ERRORS)
def catalog(request: Request, principal: Reader, conversation: str | None = None,
            ordinal: Annotated[int | None, Query(description="Nth turn (1-based; -1 = last)."
                                                 )] = None,
            when: Annotated[str | None, Query(description='A phrase: "yesterday", "last week", '
                                              '"in March 2026", "3rd turn", "the last turn".'
                                              )] = None,
            user: Annotated[str | None, Query(description="The user an analyst looks at.")
                            ] = None,
            as_of: AsOf = None, limit: Limit = DEFAULT_LIMIT,
            cursor: Cursor = None) -> CatalogAnswer:
    """A conversation's turns in order, or turns looked up by position or time phrase; one
    page of them (``next_cursor`` asks for the next)."""
    ctx = committed_context(request)
    now = parse_time(as_of, "as_of")
    # Said rather than ignored: each pair names the turns two ways.
    if ordinal is not None and when is not None:
        raise QueryError("give ordinal or when, not both (\"3rd turn\" is a when-phrase too)")
    if user is not None and conversation is not None:
        raise QueryError("give conversation or user, not both: a conversation has one user")
    if conversation is not None:
        _conversation(ctx, principal, conversation, as_of)
    if when is not None:
        turns = ctx.catalog.resolve(principal, when, conversation_id=conversation,
                                    user_id=user, as_of=now)
    elif conversation is None:
        raise QueryError("give conversation (optionally with ordinal) or when")
    elif ordinal is not None:
        turns = [ctx.catalog.nth(principal, conversation, ordinal, as_of=now)]
    else:
        turns = ctx.catalog.turns(principal, conversation, as_of=now)
    positions = list(enumerate(turns))  # the catalog's own order: the cursor is a position
    chosen, after = page(positions, lambda p: (p[0],), limit, cursor)
    return CatalogAnswer(turns=[CatalogTurnModel.model_validate(t.to_json())
                                for _, t in chosen], next_cursor=after)


@router.get("/v1/conversations", response_model=ConversationsAnswer, responses=_ERRORS)
def conversations(request: Request, principal: Reader,
                  user: Annotated[str | None, Query(description="The user an analyst looks at."
                                                    )] = None,
                  as_of: AsOf = None, limit: Limit = DEFAULT_LIMIT,
                  cursor: Cursor = None) -> ConversationsAnswer:
    """Conversations with at least one live turn, most recent activity first; one page of
    them (``next_cursor`` asks for the next)."""
    entries = committed_context(request).catalog.conversations(
        principal, user_id=user, as_of=parse_time(as_of, "as_of"))
    chosen, after = page(sorted(entries, key=_recent_first), _recent_first, limit, cursor)
    return ConversationsAnswer(conversations=chosen, next_cursor=after)


def _recent_first(entry: ConversationEntry) -> tuple[int, str]:
    """The list's order as an ascending key: latest activity first, then by id."""
    return -int(entry.last_activity_at.timestamp() * 1_000_000), entry.conversation_id


@router.get("/v1/conversations/{conversation}/turns/{turn}",
            responses={200: {"model": MaterializedTurn, "description": "The turn."},
                       **_ERRORS})
def turn(conversation: str, turn: str, request: Request, principal: Reader,
         as_of: AsOf = None) -> Response:
    """One turn materialized from its TurnLog (the `turn show --json` shape): messages, file
    cards, steps, citations, events."""
    # Parsed before the lookup: a bad time is the request's fault (400), not a missing turn.
    now = parse_time(as_of, "as_of")
    materializer = committed_context(request).materializer
    try:
        shown = materializer.turn(principal, conversation, turn, as_of=now)
    except (AccessDenied, QueryError) as exc:
        if not principal.analyst:
            raise refused(principal, f"turn {conversation}/{turn}") from None
        if isinstance(exc, QueryError):
            raise RefNotFound(str(exc)) from None
        raise
    # Serialized by its model, as the MCP get_turn tool does: every instant of the turn in
    # one format (UTC as "Z"), the recorded ones and the computed ones alike.
    return Response(_TURN_JSON.dump_json(shown), media_type="application/json")


@router.delete("/v1/conversations/{conversation}", response_model=ErasureAnswer,
               responses=_ERRORS)
def erase_conversation(conversation: str, request: Request, key: Eraser) -> ErasureAnswer:
    """Erase one conversation of the key's tenant now, as `turnlake erase` (admin keys)."""
    return _erase(request, ErasureTarget(tenant=key.tenant, conversation_id=conversation),
                  key.describe())


@router.delete("/v1/users/{user}", response_model=ErasureAnswer, responses=_ERRORS)
def erase_user(user: str, request: Request, key: Eraser) -> ErasureAnswer:
    """Erase everything of one user of the key's tenant now (admin keys)."""
    return _erase(request, ErasureTarget(tenant=key.tenant, user_id=user), key.describe())


def _erase(request: Request, target: ErasureTarget, actor: str) -> ErasureAnswer:
    # No wait here: the erasure itself waits for what any server answered before it.
    settings = context_of(request).settings
    report = erase(settings, target, actor=actor, settle=settler(settings))
    assert report.outcome is not None  # not a dry run
    return ErasureAnswer(job_id=report.plan.job_id, counts=dict(report.plan.counts),
                         deleted=dict(report.outcome.deleted))
