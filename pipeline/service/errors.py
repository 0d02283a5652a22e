"""The service's one error shape, ``{"error": {"code", "message", "field"?}}``, and the one
mapping of turnlake's error tree (lake/errors.py) to HTTP status codes."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from lake.errors import (
    AccessDenied,
    ConcurrentWriteError,
    EmbeddingError,
    IndexError_,
    LakeError,
    QueryError,
    RecordError,
    RefError,
    RefExpired,
    RefNotFound,
    TurnlakeError,
    Unauthenticated,
)
from pipeline.contract import ErrorAnswer, ErrorDetail


class BodyTooLarge(Exception):
    """A request body over the service's documented limit (``Settings.max_body_bytes``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is over the {limit}-byte limit")
        self.limit = limit


class MalformedBody(Exception):
    """A request body that is not the JSON (or NDJSON) it claims to be."""


# Most specific first: the first class an error is an instance of decides.
STATUS: tuple[tuple[type[TurnlakeError], int, str], ...] = (
    (Unauthenticated, 401, "unauthenticated"),
    (AccessDenied, 403, "forbidden"),
    (RecordError, 422, "invalid_record"),
    (RefNotFound, 404, "not_found"),
    (RefExpired, 410, "expired"),
    (RefError, 400, "invalid_ref"),
    (QueryError, 400, "invalid_request"),
    (ConcurrentWriteError, 409, "conflict"),
    (LakeError, 503, "lake_unavailable"),
    (IndexError_, 503, "index_unavailable"),
    (EmbeddingError, 503, "embedding_unavailable"),
    (TurnlakeError, 500, "internal"),
)
_HTTP_CODES = {400: "bad_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 413: "payload_too_large", 415: "unsupported_media",
               422: "invalid_request"}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error statuses a route may answer with (the one shape)."""
    return {status: {"model": ErrorAnswer} for status in (401, *statuses)}


def status_of(exc: TurnlakeError) -> tuple[int, str]:
    """The HTTP status and error code of a turnlake error."""
    for cls, status, code in STATUS:
        if isinstance(exc, cls):
            return status, code
    return 500, "internal"


def error_response(status: int, code: str, message: str, field: str | None = None,
                   ) -> JSONResponse:
    """A response in the one error shape."""
    body = ErrorAnswer(error=ErrorDetail(code=code, message=message, field=field))
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=status,
                        headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error an endpoint raises, FastAPI's own included, in the one shape."""

    @app.exception_handler(TurnlakeError)
    async def turnlake_error(request: Request, exc: TurnlakeError) -> JSONResponse:
        status, code = status_of(exc)
        return error_response(status, code, str(exc), getattr(exc, "field", None))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        # "body" / "query" / "path" lead each location; the field path is what follows.
        location = [str(p) for p in first.get("loc", ())[1:]]
        parts = []
        for error in errors[:5]:
            where = ".".join(str(p) for p in error.get("loc", ())) or "(request)"
            parts.append(f"{where}: {error.get('msg', 'invalid')}")
        return error_response(422, "invalid_request", "; ".join(parts) or "invalid request",
                              ".".join(location) or None)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(BodyTooLarge)
    async def too_large(request: Request, exc: BodyTooLarge) -> JSONResponse:
        return error_response(413, "payload_too_large", str(exc))

    @app.exception_handler(MalformedBody)
    async def malformed(request: Request, exc: MalformedBody) -> JSONResponse:
        return error_response(400, "malformed_body", str(exc))
