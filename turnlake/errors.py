"""The client's errors: every failure a caller sees is one of these, never a bare HTTP error.

::

    ClientError (a lake.errors.TurnlakeError)
    ├── ServerUnreachable      no answer after the retries (connection refused, timeouts)
    ├── TurnRejected           the server answered, but refused a turn (its reason and field)
    └── APIError               the server answered with an error: status, code, message, field
        ├── BadRequest             400
        ├── Unauthorized           401
        ├── Forbidden              403
        ├── NotFound               404
        ├── Conflict               409
        ├── Gone                   410 (a ref past its expiry)
        ├── PayloadTooLarge        413
        ├── UnsupportedMediaType   415
        ├── UnprocessableEntity    422
        ├── RateLimited            429
        ├── ServerError            500 and other 5xx
        └── ServiceUnavailable     503
"""

from __future__ import annotations

from lake.errors import TurnlakeError


class ClientError(TurnlakeError):
    """Base class of the errors the turnlake client raises."""


class ServerUnreachable(ClientError):
    """The server gave no answer within the retries: refused connections or timeouts."""


class TurnRejected(ClientError):
    """The server refused a turn of a recording (the other turns' outcomes are in
    ``answer``)."""

    def __init__(self, message: str, *, index: int, field: str | None = None) -> None:
        super().__init__(message)
        self.index = index
        self.field = field


class APIError(ClientError):
    """The server answered with an error: its HTTP status and the body's code, message and
    field (the path of the bad field, when the error is about one)."""

    status: int = 0

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(f"{message} (HTTP {status} {code}"
                         + (f", field {field})" if field else ")"))
        self.status = status
        self.code = code
        self.message = message
        self.field = field


class BadRequest(APIError):
    """400: the request is invalid (a bad option value, a malformed body)."""


class Unauthorized(APIError):
    """401: no API key, or one the server does not know."""


class Forbidden(APIError):
    """403: the key may not do this, or read this."""


class NotFound(APIError):
    """404: nothing of that name the key may read."""


class Conflict(APIError):
    """409: another writer went first; safe to retry."""


class Gone(APIError):
    """410: the object existed but is past its expiry."""


class PayloadTooLarge(APIError):
    """413: the body is over the server's limit; send fewer turns per request."""


class UnsupportedMediaType(APIError):
    """415: the body's content type is not one the route reads."""


class UnprocessableEntity(APIError):
    """422: the body does not fit the request's model."""


class RateLimited(APIError):
    """429: too many requests; retried with backoff before it is raised."""


class ServerError(APIError):
    """500 (and other 5xx but 503): the server failed; its log has the details."""


class ServiceUnavailable(APIError):
    """503: the lake, index or model is unavailable now; retried before it is raised."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
    410: Gone, 413: PayloadTooLarge, 415: UnsupportedMediaType, 422: UnprocessableEntity,
    429: RateLimited, 503: ServiceUnavailable,
}


def api_error(status: int, code: str, message: str, field: str | None = None) -> APIError:
    """The typed error of an error answer."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else APIError)
    return cls(status, code, message, field)
