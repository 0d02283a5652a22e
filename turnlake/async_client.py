"""The asyncio client: :class:`turnlake.Client`'s operations, awaited.

    async with AsyncClient("http://127.0.0.1:8700", key="tlk_...") as client:
        answer = await client.search("the forecast's timezone bug", k=5)
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable, Sequence
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
from turnlake.client import DEFAULT_TIMEOUT_S
from turnlake.errors import ServerUnreachable


class AsyncClient:
    """A connection to one turnlake server for asyncio hosts, as one API key's principal."""

    def __init__(self, url: str = "http://127.0.0.1:8700", *, key: str | None = None,
                 timeout: float | httpx.Timeout = DEFAULT_TIMEOUT_S,
                 retry: Retry | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.retry = retry or Retry()
        self._http = httpx.AsyncClient(base_url=self.url, headers=headers(key),
                                       timeout=timeout, transport=transport)

    async def record(self, turns: TurnLike | Iterable[TurnLike]) -> RecordAnswer:
        """Record one turn or several (see :meth:`turnlake.Client.record`)."""
        return RecordAnswer.model_validate(await self._json(_ops.record(turns)))

    async def search(self, query: str | QueryOptions, **options: Any) -> SearchAnswer:
        """Search what the key may read (see :meth:`turnlake.Client.search`)."""
        return SearchAnswer.model_validate(await self._json(_ops.search(query, options)))

    async def catalog(self, *, conversation: str | None = None, ordinal: int | None = None,
                      when: str | None = None, user: str | None = None,
                      as_of: str | datetime | None = None) -> CatalogAnswer:
        """A conversation's turns in order, one by ``ordinal``, or turns by a time phrase."""
        return CatalogAnswer.model_validate(await self._json(_ops.catalog(
            conversation, ordinal, when, user, as_of)))

    async def conversations(self, *, user: str | None = None,
                            as_of: str | datetime | None = None, limit: int | None = None,
                            cursor: str | None = None) -> ConversationsAnswer:
        """One page of conversations, most recent activity first."""
        return ConversationsAnswer.model_validate(await self._json(_ops.conversations(
            user, as_of, limit, cursor)))

    async def turn(self, conversation: str, turn: str, *,
                   as_of: str | datetime | None = None) -> dict[str, Any]:
        """One turn as ``turnlake turn show --json`` prints it."""
        shown: dict[str, Any] = await self._json(_ops.turn(conversation, turn, as_of))
        return shown

    async def resolve(self, address: str, *, as_of: str | datetime | None = None
                      ) -> dict[str, Any]:
        """What a ``conv:*`` address names, as JSON (Client.resolve)."""
        resolved: dict[str, Any] = await self._json(_ops.resolve(address, as_of))
        return resolved

    async def file(self, ref: str, destination: str | os.PathLike[str] | IO[bytes]) -> int:
        """Stream a hosted file's bytes to a path or a binary file object; the byte count."""
        op = _ops.file(ref)
        for attempt in range(self.retry.attempts):
            try:
                async with self._http.stream(op.method, op.path) as response:
                    if should_retry(response) and attempt < self.retry.attempts - 1:
                        await response.aread()
                        await asyncio.sleep(self.retry.delay(attempt, response))
                        continue
                    if response.status_code >= 400:
                        await response.aread()
                        raise_for_error(response)
                    return await _write_stream(response.aiter_bytes(), destination)
            except httpx.TransportError as exc:
                if attempt == self.retry.attempts - 1:
                    raise ServerUnreachable(f"{self.url}: {exc}") from None
                await asyncio.sleep(self.retry.delay(attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    async def pull(self, targets: Sequence[str], *, into: str = "") -> PullAnswer:
        """Copy turns' files into a folder below the server's workspace."""
        return PullAnswer.model_validate(await self._json(_ops.pull(targets, into)))

    async def erase_conversation(self, conversation: str) -> ErasureAnswer:
        """Erase one conversation of the key's tenant now (admin keys)."""
        return ErasureAnswer.model_validate(
            await self._json(_ops.erase_conversation(conversation)))

    async def erase_user(self, user: str) -> ErasureAnswer:
        """Erase everything of one user of the key's tenant now (admin keys)."""
        return ErasureAnswer.model_validate(await self._json(_ops.erase_user(user)))

    async def health(self) -> dict[str, Any]:
        """``GET /healthz`` (needs no key)."""
        answer: dict[str, Any] = await self._json(_ops.health())
        return answer

    async def _json(self, op: _ops.Op) -> Any:
        return (await self._send(op)).json()

    async def _send(self, op: _ops.Op) -> httpx.Response:
        extra = {"Content-Type": op.content_type} if op.content_type else None
        for attempt in range(self.retry.attempts):
            last = attempt == self.retry.attempts - 1
            try:
                response = await self._http.request(
                    op.method, op.path, params=op.params or None, content=op.body,
                    headers=extra)
            except httpx.TransportError as exc:
                if last:
                    raise ServerUnreachable(f"{self.url}: {exc}") from None
                await asyncio.sleep(self.retry.delay(attempt))
                continue
            if should_retry(response) and not last:
                await asyncio.sleep(self.retry.delay(attempt, response))
                continue
            raise_for_error(response)
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _write_stream(chunks: AsyncIterator[bytes],
                        destination: str | os.PathLike[str] | IO[bytes]) -> int:
    size = 0
    if isinstance(destination, str | os.PathLike):
        final = Path(destination)
        partial = final.with_name(f".{final.name}.part")
        try:
            with open(partial, "wb") as fh:
                async for chunk in chunks:
                    fh.write(chunk)
                    size += len(chunk)
            os.replace(partial, final)
        finally:
            partial.unlink(missing_ok=True)
        return size
    async for chunk in chunks:
        destination.write(chunk)
        size += len(chunk)
    return size
