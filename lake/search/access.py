"""Who may see what: principals and the scope rules every read path goes through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lake.errors import AccessDenied, QueryError
from lake.refs import validate_id

Scope = Literal["conversation", "user", "tenant"]
SCOPES: tuple[Scope, ...] = ("conversation", "user", "tenant")


@dataclass(frozen=True)
class Principal:
    """The caller: an end user of a tenant, or an analyst of a tenant (``analyst=True``).

    An analyst may act with or without a ``user_id``; with one, user scope means that user.
    """

    tenant: str
    user_id: str | None = None
    analyst: bool = False

    def __post_init__(self) -> None:
        validate_id(self.tenant, "tenant")
        if self.user_id is not None:
            validate_id(self.user_id, "user_id")
        if not self.analyst and self.user_id is None:
            raise AccessDenied("an end-user principal needs a user_id")

    def describe(self) -> str:
        """A short human description for messages and audit rows."""
        if self.analyst:
            looking_at = f" (looking at user {self.user_id})" if self.user_id else ""
            return f"analyst of tenant {self.tenant}{looking_at}"
        return f"user {self.user_id} of tenant {self.tenant}"


@dataclass(frozen=True)
class ResolvedScope:
    """The filters a scope turns into: always a tenant, optionally a user and a conversation."""

    tenant: str
    user_id: str | None
    conversation_id: str | None


def resolve_scope(principal: Principal, scope: Scope, *, user_id: str | None = None,
                  conversation_id: str | None = None) -> ResolvedScope:
    """Apply the access rules; raise AccessDenied or QueryError when the request may not run.

    End users: only their own conversation or user scope. Analysts: all three scopes, within
    their tenant only. No scope ever crosses a tenant.
    """
    if scope not in SCOPES:
        raise QueryError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    if conversation_id is not None:
        validate_id(conversation_id, "conversation_id")
    if user_id is not None:
        validate_id(user_id, "user_id")
    if not principal.analyst:
        if scope == "tenant":
            raise AccessDenied(f"{principal.describe()} may not search the whole tenant")
        if user_id is not None and user_id != principal.user_id:
            raise AccessDenied(f"{principal.describe()} may not read user {user_id}")
        user_id = principal.user_id
    elif scope == "tenant" and user_id is not None:
        # said rather than ignored: the answer would hold every user's turns
        raise QueryError(f"a tenant-scope search covers every user: drop user {user_id}, or "
                         "search scope user", field="user")
    else:
        user_id = user_id or principal.user_id
    if scope == "conversation":
        if conversation_id is None:
            raise QueryError("scope conversation needs the conversation to search: give "
                             "conversation", field="conversation")
        return ResolvedScope(principal.tenant, user_id, conversation_id)
    if scope == "user":
        if user_id is None:
            raise QueryError("scope user needs the user whose turns to search: an analyst "
                             "gives user (or searches scope tenant)", field="user")
        return ResolvedScope(principal.tenant, user_id, conversation_id)
    return ResolvedScope(principal.tenant, None, conversation_id)
