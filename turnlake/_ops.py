"""Each operation of the service as one request (method, path, query, body): built once here
for the sync and the async client alike."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from pipeline.contract import PullBody, QueryOptions
from turnlake._http import JSON, TurnLike, query_params, record_body, ref_path, turn_path


@dataclass(frozen=True)
class Op:
    """One request to send."""

    method: str
    path: str
    params: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    content_type: str | None = None


def record(turns: TurnLike | Iterable[TurnLike]) -> Op:
    """``POST /v1/turns``."""
    body, content_type = record_body(turns)
    return Op("POST", "/v1/turns", body=body, content_type=content_type)


def search(query: str | QueryOptions, options: dict[str, Any]) -> Op:
    """``POST /v1/search``; the options are checked here, so a misspelt one fails before
    anything is sent."""
    if isinstance(query, QueryOptions):
        if options:
            raise TypeError("give a QueryOptions or keyword options, not both")
        chosen = query
    else:
        given = {k: (v.isoformat() if isinstance(v, datetime) else v)
                 for k, v in options.items()}
        chosen = QueryOptions.model_validate({"query": query, **given})
    body = chosen.model_dump(mode="json", exclude_unset=True)
    body["query"] = chosen.query
    return Op("POST", "/v1/search", body=json.dumps(body).encode(), content_type=JSON)


def catalog(conversation: str | None, ordinal: int | None, when: str | None,
            user: str | None, as_of: str | datetime | None) -> Op:
    """``GET /v1/catalog``."""
    return Op("GET", "/v1/catalog", query_params(
        conversation=conversation, ordinal=ordinal, when=when, user=user, as_of=as_of))


def conversations(user: str | None, as_of: str | datetime | None, limit: int | None,
                  cursor: str | None) -> Op:
    """``GET /v1/conversations``."""
    return Op("GET", "/v1/conversations", query_params(user=user, as_of=as_of, limit=limit,
                                                        cursor=cursor))


def turn(conversation: str, turn_id: str, as_of: str | datetime | None) -> Op:
    """``GET /v1/conversations/{c}/turns/{t}``."""
    return Op("GET", turn_path(conversation, turn_id), query_params(as_of=as_of))


def file(ref: str) -> Op:
    """``GET /v1/refs/{ref}``."""
    return Op("GET", ref_path(ref))


def resolve(address: str, as_of: str | datetime | None) -> Op:
    """``GET /v1/refs/{ref}`` of a record's address (JSON)."""
    if address.startswith("conv:fi:"):
        raise ValueError(f"{address} names a file's bytes: read them with file(ref, "
                         "destination)")
    return Op("GET", ref_path(address), query_params(as_of=as_of))


def pull(targets: Sequence[str], into: str) -> Op:
    """``POST /v1/pull``."""
    body = PullBody(targets=list(targets), into=into)
    return Op("POST", "/v1/pull", body=body.model_dump_json().encode(), content_type=JSON)


def erase_conversation(conversation: str) -> Op:
    """``DELETE /v1/conversations/{c}``."""
    return Op("DELETE", f"/v1/conversations/{_segment(conversation)}")


def erase_user(user: str) -> Op:
    """``DELETE /v1/users/{u}``."""
    return Op("DELETE", f"/v1/users/{_segment(user)}")


def health() -> Op:
    """``GET /healthz``."""
    return Op("GET", "/healthz")


def _segment(value: str) -> str:
    return quote(value, safe="")
