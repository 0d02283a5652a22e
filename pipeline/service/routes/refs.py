"""``GET /v1/refs/{ref}``: the bytes of a hosted file, with its content type and length."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from lake.errors import AccessDenied, RefNotFound
from pipeline.service.auth import Reader
from pipeline.service.context import committed_context
from pipeline.service.errors import error_responses
from pipeline.service.routes.conversations import refused

router = APIRouter(tags=["refs"])
_CHUNK = 256 * 1024


@router.get("/v1/refs/{ref:path}", response_class=StreamingResponse,
            responses={200: {"content": {"application/octet-stream": {}}},
                       **error_responses(400, 403, 404, 410)})
def resolve_ref(ref: str, request: Request, principal: Reader) -> StreamingResponse:
    """Stream the bytes behind a `conv:fi:` ref the key may read and that is retained."""
    try:
        card, data = committed_context(request).materializer.resolve(principal, ref)
    except (AccessDenied, RefNotFound):
        if not principal.analyst:
            raise refused(principal, ref) from None
        raise
    view = memoryview(data)

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(view), _CHUNK):
            yield bytes(view[start:start + _CHUNK])

    name = card.name or PurePosixPath(card.path).name or "file"
    return StreamingResponse(chunks(), media_type=card.mime, headers={
        "Content-Length": str(len(data)),
        "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name)}"})
