"""What the sync and async clients share: how a request is built, how an answer becomes a
model or a typed error, and when a failed request is tried again."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from lake.records import TurnRecord
from turnlake.errors import APIError, TurnRejected, api_error

# Safe to send again: recording is idempotent (a turn's ids make a repeat a duplicate), and
# the other routes read. 429 and 503 say "later"; the rest of the errors will not change.
RETRY_STATUSES = frozenset({429, 503})
NDJSON = "application/x-ndjson"
JSON = "application/json"

TurnLike = TurnRecord | Mapping[str, Any]


@dataclass(frozen=True)
class Retry:
    """How often and how long to try a request again after a connection error, a timeout, a
    429 or a 503: ``attempts`` tries in all, waiting ``backoff_s`` × 2^n (with jitter, at
    most ``max_backoff_s``; a ``Retry-After`` header is honoured up to that cap)."""

    attempts: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def delay(self, attempt: int, response: httpx.Response | None = None) -> float:
        """Seconds to wait before try ``attempt + 1`` (``attempt`` counts from 0)."""
        wanted = self.backoff_s * (2 ** attempt) * (0.5 + random.random() / 2)
        if response is not None:
            after = response.headers.get("retry-after", "")
            if after.replace(".", "", 1).isdigit():
                wanted = float(after)
        return float(min(wanted, self.max_backoff_s))


def should_retry(response: httpx.Response) -> bool:
    """True when the answer says to try again later."""
    return response.status_code in RETRY_STATUSES


def raise_for_error(response: httpx.Response) -> None:
    """The typed error of an error answer (its code, message and field), if it is one."""
    if response.status_code < 400:
        return
    code, message, field = f"http_{response.status_code}", response.text[:500], None
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict):
        code = str(error.get("code", code))
        message = str(error.get("message", message))
        field = error.get("field")
    raise api_error(response.status_code, code, message or response.reason_phrase, field)


def headers(key: str | None) -> dict[str, str]:
    """The headers every request carries."""
    out = {"Accept": JSON, "User-Agent": "turnlake-python"}
    if key:
        out["Authorization"] = f"Bearer {key}"
    return out


def turn_json(turn: TurnLike) -> bytes:
    """One turn as the body's JSON."""
    if isinstance(turn, TurnRecord):
        return turn.to_json_bytes()
    return json.dumps(dict(turn), separators=(",", ":"), default=_json_default).encode()


def record_body(turns: TurnLike | Iterable[TurnLike]) -> tuple[bytes, str]:
    """The body and content type of a recording: one turn as JSON, several as NDJSON."""
    if isinstance(turns, TurnRecord | Mapping):
        return turn_json(turns), JSON
    lines = [turn_json(t) for t in turns]
    if not lines:
        raise ValueError("record() needs at least one turn")
    return b"\n".join(lines) + b"\n", NDJSON


def first_rejection(turns: Any) -> TurnRejected | None:
    """The error of the first rejected turn of a recording's answer, if one was."""
    for outcome in turns:
        if outcome.status == "rejected":
            where = f"{outcome.conversation_id}/{outcome.turn_id}" if outcome.turn_id else (
                f"#{outcome.index}")
            return TurnRejected(f"turn {where} was rejected: {outcome.reason}",
                                index=outcome.index, field=outcome.field)
    return None


def query_params(**values: Any) -> dict[str, str]:
    """Query parameters without the unset ones; times in ISO 8601."""
    return {name: (v.isoformat() if isinstance(v, datetime) else str(v))
            for name, v in values.items() if v is not None}


def ref_path(ref: str) -> str:
    """The path of ``GET /v1/refs/{ref}`` (the ref's ``/`` kept, the rest quoted)."""
    return "/v1/refs/" + quote(ref, safe="/:")


def turn_path(conversation: str, turn: str) -> str:
    """The path of one turn."""
    return f"/v1/conversations/{quote(conversation, safe='')}/turns/{quote(turn, safe='')}"


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


__all__ = ["APIError", "Retry", "first_rejection", "headers", "query_params", "raise_for_error",
           "record_body", "ref_path", "should_retry", "turn_json", "turn_path"]
