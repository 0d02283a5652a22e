"""The synchronous client of a turnlake server.

    from turnlake import Client

    with Client("http://127.0.0.1:8700", key="tlk_...") as client:
        client.record(turn)                       # one turn, or a list (sent as NDJSON)
        for hit in client.search("the forecast's timezone bug").hits:
            print(hit.conversation_id, hit.turn_id, hit.relevance)

Every answer is the service's own pydantic model (pipeline.contract); every error is a
:mod:`turnlake.errors` error carrying the server's code, message and field. Connection
errors, timeouts, 429 and 503 are tried again with backoff (:class:`turnlake.Retry`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import httpx

from pipeline.contract import (
    CatalogAnswer,
    ConversationsAnswer,
    ErasureAnswer,
    PullAnswer,
    QueryOptions,
    RecordAnswer,
    SearchAnswer,
)
from turnlake import _ops
from turnlake._http import Retry, TurnLike, headers, raise_for_error, should_retry
from turnlake.errors import ServerUnreachable

DEFAULT_TIMEOUT_S = 60.0  # a recording is answered once durable, which may take seconds


class Client:
    """A connection to one turnlake server, as the principal of one API key."""

    def __init__(self, url: str = "http://127.0.0.1:8700", *, key: str | None = None,
                 timeout: float | httpx.Timeout = DEFAULT_TIMEOUT_S,
                 retry: Retry | None = None, transport: httpx.BaseTransport | None = None,
                 ) -> None:
        self.url = url.rstrip("/")
        self.retry = retry or Retry()
        self._http = httpx.Client(base_url=self.url, headers=headers(key), timeout=timeout,
                                  transport=transport)

    # -- recording ------------------------------------------------------------------------

    def record(self, turns: TurnLike | Iterable[TurnLike]) -> RecordAnswer:
        """Record one turn (a TurnRecord or its JSON dict) or several (sent as NDJSON).
        Each turn's outcome is in the answer: accepted, duplicate, or rejected with the
        reason and field."""
        return RecordAnswer.model_validate(self._json(_ops.record(turns)))

    # -- reading --------------------------------------------------------------------------

    def search(self, query: str | QueryOptions, **options: Any) -> SearchAnswer:
        """Search what the key may read; ``options`` are :class:`QueryOptions`' fields
        (``user``, ``scope``, ``conversation``, ``roles``, ``k``, ``since``, ``until``,
        ``as_of``, ``min_relevance``, ...)."""
        return SearchAnswer.model_validate(self._json(_ops.search(query, options)))

    def catalog(self, *, conversation: str | None = None, ordinal: int | None = None,
                when: str | None = None, user: str | None = None,
                as_of: str | datetime | None = None) -> CatalogAnswer:
        """A conversation's turns in order, one by ``ordinal``, or turns by a time phrase."""
        return CatalogAnswer.model_validate(self._json(_ops.catalog(
            conversation, ordinal, when, user, as_of)))

    def conversations(self, *, user: str | None = None, as_of: str | datetime | None = None,
                      limit: int | None = None, cursor: str | None = None,
                      ) -> ConversationsAnswer:
        """One page of conversations, most recent activity first (``next_cursor`` asks for
        the next page)."""
        return ConversationsAnswer.model_validate(self._json(_ops.conversations(
            user, as_of, limit, cursor)))

    def turn(self, conversation: str, turn: str, *, as_of: str | datetime | None = None,
             ) -> dict[str, Any]:
        """One turn as ``turnlake turn show --json`` prints it."""
        shown: dict[str, Any] = self._json(_ops.turn(conversation, turn, as_of))
        return shown

    def resolve(self, address: str, *, as_of: str | datetime | None = None
                ) -> dict[str, Any]:
        """What a ``conv:*`` address (a hit's ``address`` or ``turn_address``, one of a
        turn's ``addresses``, a ref written in a text) names, as JSON: the record or a part
        of it, a step, a search row, an event (``file`` reads a ``conv:fi:`` ref's bytes).
        A user key gets one refusal (Forbidden) for another user's object and a missing one;
        an analyst's gets NotFound for a missing one; an expired one is Gone."""
        resolved: dict[str, Any] = self._json(_ops.resolve(address, as_of))
        return resolved

    def file(self, ref: str, destination: str | os.PathLike[str] | IO[bytes]) -> int:
        """Stream a hosted file's bytes (a ``conv:fi:`` ref) to a path or a binary file
        object; returns the byte count. A path is written whole or not at all."""
        op = _ops.file(ref)
        for attempt in range(self.retry.attempts):
            try:
                with self._http.stream(op.method, op.path) as response:
                    if should_retry(response) and attempt < self.retry.attempts - 1:
                        response.read()
                        time.sleep(self.retry.delay(attempt, response))
                        continue
                    if response.status_code >= 400:
                        response.read()
                        raise_for_error(response)
                    return _write_stream(response.iter_bytes(), destination)
            except httpx.TransportError as exc:
                if attempt == self.retry.attempts - 1:
                    raise ServerUnreachable(f"{self.url}: {exc}") from None
                time.sleep(self.retry.delay(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def pull(self, targets: Sequence[str], *, into: str = "") -> PullAnswer:
        """Copy turns' files into a folder below the server's workspace (a server on the
        agent's own machine, started with ``--workspace``)."""
        return PullAnswer.model_validate(self._json(_ops.pull(targets, into)))

    # -- erasing (admin keys) -------------------------------------------------------------

    def erase_conversation(self, conversation: str) -> ErasureAnswer:
        """Erase one conversation of the key's tenant now."""
        return ErasureAnswer.model_validate(self._json(_ops.erase_conversation(conversation)))

    def erase_user(self, user: str) -> ErasureAnswer:
        """Erase everything of one user of the key's tenant now."""
        return ErasureAnswer.model_validate(self._json(_ops.erase_user(user)))

    def health(self) -> dict[str, Any]:
        """``GET /healthz`` (needs no key)."""
        answer: dict[str, Any] = self._json(_ops.health())
        return answer

    # -- plumbing -------------------------------------------------------------------------

    def _json(self, op: _ops.Op) -> Any:
        return self._send(op).json()

    def _send(self, op: _ops.Op) -> httpx.Response:
        """Send with the retry policy; the typed error of an error answer."""
        extra = {"Content-Type": op.content_type} if op.content_type else None
        for attempt in range(self.retry.attempts):
            last = attempt == self.retry.attempts - 1
            try:
                response = self._http.request(op.method, op.path, params=op.params or None,
                                              content=op.body, headers=extra)
            except httpx.TransportError as exc:
                if last:
                    raise ServerUnreachable(f"{self.url}: {exc}") from None
                time.sleep(self.retry.delay(attempt))
                continue
            if should_retry(response) and not last:
                time.sleep(self.retry.delay(attempt, response))
                continue
            raise_for_error(response)
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _write_stream(chunks: Iterable[bytes], destination: str | os.PathLike[str] | IO[bytes],
                  ) -> int:
    size = 0
    if isinstance(destination, str | os.PathLike):
        final = Path(destination)
        partial = final.with_name(f".{final.name}.part")
        try:
            with open(partial, "wb") as fh:
                for chunk in chunks:
                    fh.write(chunk)
                    size += len(chunk)
            os.replace(partial, final)
        finally:
            partial.unlink(missing_ok=True)
        return size
    for chunk in chunks:
        destination.write(chunk)
        size += len(chunk)
    return size
