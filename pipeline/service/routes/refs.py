"""``GET /v1/refs/{ref}``: what an address names — a record, step, search row or event as
JSON (:class:`lake.resolver.ResolvedRecord`), or a hosted file's bytes with its content type
and length."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from lake.resolver import RefResolver, ResolvedFile, ResolvedRecord
from pipeline.contract import parse_time
from pipeline.service.auth import Reader
from pipeline.service.context import committed_context
from pipeline.service.errors import error_responses

router = APIRouter(tags=["refs"])
_CHUNK = 256 * 1024


@router.get("/v1/refs/{ref:path}", response_model=None,
            responses={200: {"model": ResolvedRecord, "description": (
                "JSON for a record, step, search row or event; the bytes of a conv:fi: file.")
                , "content": {"application/octet-stream": {}}},
                       **error_responses(400, 403, 404, 410)})
def resolve_ref(ref: str, request: Request, principal: Reader,
                as_of: Annotated[str | None, Query(
                    description="Evaluate as of this time (ISO 8601).")] = None) -> Response:
    """Resolve a conv:* address the key may read and that is retained. An end user's key gets
    one refusal (403) for another user's object and for none; an expired object is 410."""
    now = parse_time(as_of, "as_of")
    resolver = RefResolver(committed_context(request).materializer)
    resolved = resolver.resolve(principal, ref, as_of=now)
    if isinstance(resolved, ResolvedRecord):
        return JSONResponse(resolved.model_dump(mode="json"))
    return _file_response(resolved)


def _file_response(resolved: ResolvedFile) -> StreamingResponse:
    card, view = resolved.card, memoryview(resolved.data)

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(view), _CHUNK):
            yield bytes(view[start:start + _CHUNK])

    name = card.name or PurePosixPath(card.path).name or "file"
    return StreamingResponse(chunks(), media_type=card.mime, headers={
        "Content-Length": str(len(view)),
        "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name)}"})
