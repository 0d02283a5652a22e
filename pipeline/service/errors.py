"""The service's one error shape, ``{"error": {"code", "message", "field"?}}``, and the one
mapping of turnlake's error tree (lake/errors.py) to HTTP status codes."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from lake import errors as lake_errors
from pipeline.contract import ErrorAnswer, ErrorDetail

log = logging.getLogger(__name__)


class BodyTooLarge(Exception):
    """A request body over the service's documented limit (``Settings.max_body_bytes``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is over the {limit}-byte limit")
        self.limit = limit


class MalformedBody(Exception):
    """A request body that is not the JSON (or NDJSON) it claims to be."""


class UnsupportedMedia(Exception):
    """A request body in a content type the route does not read (415): the one rule of every
    route with a body is JSON (``application/json`` or ``*+json``; a body without a type is
    read as JSON), and ``POST /v1/turns`` reads NDJSON too."""

    def __init__(self, given: str, accepted: str = "application/json") -> None:
        super().__init__(f"the body must be sent with Content-Type: {accepted}, not {given}")


def require_media(content_type: str | None, *, also: tuple[str, ...] = ()) -> str:
    """The media type of a body a route reads (JSON, or one of ``also``); UnsupportedMedia
    otherwise. No Content-Type at all is read as JSON, as FastAPI reads it."""
    kind = (content_type or "application/json").split(";", 1)[0].strip().lower()
    if _is_json(kind) or kind in also:
        return kind
    raise UnsupportedMedia(kind, " or ".join(("application/json", *also[:1])))


class InvalidField(lake_errors.QueryError):
    """A request value the service refuses (400), naming the field of the body it is in."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message, field=field)


# Most specific first: the first class an error is an instance of decides.
STATUS: tuple[tuple[type[lake_errors.TurnlakeError], int, str], ...] = (
    # who is asking
    (lake_errors.Unauthenticated, 401, "unauthenticated"),
    (lake_errors.AccessDenied, 403, "forbidden"),
    # what was asked for
    (lake_errors.RecordError, 422, "invalid_record"),
    (lake_errors.RefNotFound, 404, "not_found"),
    (lake_errors.RefExpired, 410, "expired"),
    (lake_errors.RefError, 400, "invalid_ref"),
    (lake_errors.QueryError, 400, "invalid_request"),
    (lake_errors.ConcurrentWriteError, 409, "conflict"),
    # a pull's folder in the way (a file, a symlink, a bad manifest): the request must change
    (lake_errors.WorkspaceError, 400, "invalid_workspace"),
    # what the service cannot do now
    (lake_errors.LakeError, 503, "lake_unavailable"),
    (lake_errors.IndexUnavailable, 503, "index_unavailable"),
    (lake_errors.EmbeddingError, 503, "embedding_unavailable"),
    (lake_errors.TurnlakeError, 500, "internal"),
)
_HTTP_CODES = {400: "bad_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 413: "payload_too_large", 415: "unsupported_media",
               422: "invalid_request"}


_ERROR_DOC = {400: "The request is invalid; `field` names the part at fault.",
              401: "No API key, or one the server does not know.",
              403: "The key may not do this, or read this.",
              404: "Nothing of that name the key may read.",
              409: "Another writer went first; safe to retry.",
              410: "The object existed but is past its expiry.",
              413: "The body is over the server's limit.",
              415: "The body's Content-Type is not one the route reads.",
              422: "The request does not fit its model; `field` names the first bad field.",
              500: "The server failed; its log has the details.",
              503: "The lake, an index or the model is unavailable now; retry later."}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error statuses a route may answer with (the one shape): those
    given, and 401, 422, 500 and 503, which any route with a key may answer."""
    every = sorted({401, 422, 500, 503, *statuses})
    return {status: {"model": ErrorAnswer, "description": _ERROR_DOC.get(status, "Error.")}
            for status in every}


def status_of(exc: lake_errors.TurnlakeError) -> tuple[int, str]:
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


def _body_not_json(error: dict[str, Any], content_type: str | None) -> JSONResponse | None:
    """The answer to a JSON body FastAPI could not read as JSON, else None (a body that
    does not fit its model stays a 422)."""
    location = tuple(error.get("loc", ()))
    if error.get("type") == "json_invalid":
        # FastAPI's location is ("body", character offset): an offset, not a field.
        offset = location[1] if len(location) > 1 else "?"
        reason = error.get("ctx", {}).get("error", error.get("msg", "invalid JSON"))
        return error_response(400, "malformed_body", f"the body is not valid JSON: {reason} "
                              f"at character {offset}")
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if location == ("body",) and kind and not _is_json(kind):
        # FastAPI parses a body as JSON only when it says it is; curl -d says it is a form.
        return error_response(415, "unsupported_media", str(UnsupportedMedia(kind)))
    return None


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or media_type.endswith("+json")


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error an endpoint raises, FastAPI's own included, in the one shape."""

    @app.exception_handler(lake_errors.TurnlakeError)
    async def turnlake_error(request: Request, exc: lake_errors.TurnlakeError) -> JSONResponse:
        status, code = status_of(exc)
        return error_response(status, code, str(exc), getattr(exc, "field", None))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        refused = _body_not_json(first, request.headers.get("content-type"))
        if refused is not None:
            return refused
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

    @app.exception_handler(UnsupportedMedia)
    async def unsupported(request: Request, exc: UnsupportedMedia) -> JSONResponse:
        return error_response(415, "unsupported_media", str(exc))

    @app.exception_handler(MalformedBody)
    async def malformed(request: Request, exc: MalformedBody) -> JSONResponse:
        return error_response(400, "malformed_body", str(exc))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Logged here, before the answer leaves: a client that reads the server's log when it
        # sees the 500 finds the traceback there (uvicorn logs it again once the answer is out).
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error_response(500, "internal", f"internal error ({type(exc).__name__}); "
                              "the server's log has the details")
