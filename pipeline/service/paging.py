"""Cursor paging of the list routes: ``limit`` items per answer and an opaque
``next_cursor`` that asks for the items after them (absent on the last page).

A cursor holds the sort key of the last item sent, so the next page starts after that item
even when items were added before it meanwhile (a conversation with new activity moves to
the front of the list; it is not sent twice in one walk unless it moves past the cursor).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

from fastapi import Query

from lake.errors import QueryError

_T = TypeVar("_T")
Key = tuple[Any, ...]
# One page holds what a list answered before it had pages (a lake of up to a thousand
# conversations, a conversation of up to a thousand turns): paging is there when asked for.
MAX_LIMIT = 1000
DEFAULT_LIMIT = MAX_LIMIT

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=(
    "Items per page; the answer's next_cursor asks for the next page."))]
Cursor = Annotated[str | None, Query(description=(
    "The next_cursor of the previous page (absent: the first page)."))]


def page(items: Sequence[_T], key: Callable[[_T], Key], limit: int,
         cursor: str | None) -> tuple[list[_T], str | None]:
    """The page of ``items`` (sorted ascending by ``key``) after ``cursor``, and the cursor
    of the page after it (None when this is the last)."""
    start = 0
    if cursor is not None:
        after = _decode(cursor)
        start = next((n for n, item in enumerate(items) if list(key(item)) > after),
                     len(items))
    chosen = list(items[start:start + limit])
    more = start + limit < len(items)
    return chosen, (_encode(key(chosen[-1])) if more and chosen else None)


def _encode(key: Key) -> str:
    raw = json.dumps(list(key), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str) -> list[Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError):
        value = None
    if not isinstance(value, list):
        raise QueryError("cursor is not a next_cursor this server gave", field="cursor")
    return value
