"""What comes in: the body limit every request body is held to (:class:`BodyLimit`), and a
recording request's body split into turn lines: one ``turnlake.turn.v1`` object,
``{"turns": [...]}``, or NDJSON (one object per line).

Only what identity demands is checked here — that each turn is a JSON object of the key's
tenant; everything else (the schema, duplicates, a conversation's owner) is the ingest's to
decide, so a bad turn is reported and quarantined the way ``turnlake ingest`` would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeline.ingest import TurnKey
from pipeline.service.errors import BodyTooLarge, MalformedBody, error_response
from pipeline.service.outcomes import LineOutcome

NDJSON_TYPES = ("application/x-ndjson", "application/jsonl", "application/json-lines",
                "application/ndjson")


class BodyLimit:
    """ASGI middleware: a request whose body passes ``limit`` bytes is answered 413 (the one
    error shape) before any route sees it — by its Content-Length when it declares one, else
    as the bytes arrive. Every route's body limit, ``POST /v1/turns``'s included."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Buffer the body (at most ``limit`` bytes), then hand it on to the app."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        try:
            body = None if _over(declared, self.limit) else await _read(receive, self.limit)
        except _ClientLeft:
            return  # nobody to answer, and a cut body must not reach a route
        if body is None:
            too_large = BodyTooLarge(self.limit)
            await error_response(413, "payload_too_large", str(too_large))(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)


class _ClientLeft(Exception):
    """The client disconnected before its body was whole."""


def _over(declared: str | None, limit: int) -> bool:
    return declared is not None and declared.isdigit() and int(declared) > limit


async def _read(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None as soon as it passes ``limit``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise _ClientLeft
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the buffered body once, then what the client sends next
    (its disconnect, which streaming answers listen for)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


@dataclass(frozen=True)
class Intake:
    """The turns of one request: those to ingest, and those refused before any ingest."""

    count: int
    lines: list[str]  # JSON text of each turn to ingest
    keys: list[TurnKey | None]
    positions: list[int]  # each line's position in the request
    refused: dict[int, LineOutcome]  # by position
    ids: list[tuple[str | None, str | None]]  # (conversation_id, turn_id) by position


def split_body(body: bytes, content_type: str, tenant: str) -> Intake:
    """Split a body into turns; MalformedBody when it is not JSON / NDJSON of objects."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind in NDJSON_TYPES:
        # Blank lines are no turns, but a reason names the line as an editor numbers it.
        given = [(n, line) for n, line in enumerate(body.split(b"\n"), start=1)
                 if line.strip()]
        records = [_parse_line(line, n) for n, line in given]
        texts: list[bytes | None] = [line for _, line in given]
    else:
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise MalformedBody(f"the body is not valid JSON: {exc}") from None
        records = _records_of(parsed)
        texts = [None] * len(records)
    if not records:
        raise MalformedBody("the request has no turns")
    return _intake(records, texts, tenant)


def _parse_line(line: bytes, number: int) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return _Unparsed(f"line {number} is not valid JSON: {exc}")


@dataclass(frozen=True)
class _Unparsed:
    reason: str


def _records_of(parsed: Any) -> list[Any]:
    if isinstance(parsed, dict) and "schema" not in parsed and "turns" in parsed:
        extra = sorted(set(parsed) - {"turns"})
        if extra:
            raise MalformedBody(f"unknown field(s) beside turns: {', '.join(extra)}")
        turns = parsed["turns"]
        if not isinstance(turns, list):
            raise MalformedBody("turns must be a list of turn objects")
        return turns
    if isinstance(parsed, dict):
        return [parsed]
    raise MalformedBody("the body must be a turn object, {\"turns\": [...]} or NDJSON")


def _intake(records: list[Any], texts: list[bytes | None], tenant: str) -> Intake:
    lines: list[str] = []
    keys: list[TurnKey | None] = []
    positions: list[int] = []
    refused: dict[int, LineOutcome] = {}
    ids: list[tuple[str | None, str | None]] = []
    for position, (record, text) in enumerate(zip(records, texts, strict=True)):
        if isinstance(record, _Unparsed):
            refused[position] = LineOutcome("rejected", record.reason)
            ids.append((None, None))
            continue
        if not isinstance(record, dict):
            refused[position] = LineOutcome("rejected", "a turn must be a JSON object")
            ids.append((None, None))
            continue
        conversation, turn = record.get("conversation_id"), record.get("turn_id")
        ids.append((conversation if isinstance(conversation, str) else None,
                    turn if isinstance(turn, str) else None))
        if record.get("tenant") != tenant:
            # Never ingested: nothing of another tenant's may enter this tenant's lake rows.
            given = record.get("tenant")
            refused[position] = LineOutcome("rejected", (
                f"the turn has no tenant; it must be the key's, {tenant!r}" if given is None
                else f"the turn's tenant {given!r} is not the key's tenant {tenant!r}"),
                "tenant")
            continue
        lines.append(text.decode("utf-8", errors="replace") if text is not None
                     else orjson.dumps(record).decode())
        keys.append((tenant, conversation, turn)
                    if isinstance(conversation, str) and isinstance(turn, str) else None)
        positions.append(position)
    return Intake(len(records), lines, keys, positions, refused, ids)
