// The client's errors: one class per way a call fails, each an instance of TurnlakeError,
// the same tree as the Python client's (turnlake/errors.py):
//
//   TurnlakeError
//   ├── ServerUnreachableError   no answer after the retries (refused, reset, DNS)
//   │   └── TurnlakeTimeoutError     ...because the attempts timed out
//   ├── TurnRejectedError        the server answered, but refused a recorded turn
//   └── ApiError                 an error answer: status, and the service's code, message, field
//       ├── BadRequestError 400, UnauthorizedError 401, ForbiddenError 403, NotFoundError 404,
//       ├── ConflictError 409, GoneError 410, PayloadTooLargeError 413,
//       ├── UnsupportedMediaTypeError 415, UnprocessableEntityError 422, RateLimitedError 429,
//       └── ServerError 500 (and other 5xx), ServiceUnavailableError 503

/** Any failure of a turnlake call. */
export class TurnlakeError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The service could not be reached (refused, reset, DNS, timeouts), after the retries. */
export class ServerUnreachableError extends TurnlakeError {}

/** The service did not answer within the client's timeout, after the retries. */
export class TurnlakeTimeoutError extends ServerUnreachableError {
  readonly timeoutMs: number;

  constructor(message: string, timeoutMs: number, options?: { cause?: unknown }) {
    super(message, options);
    this.timeoutMs = timeoutMs;
  }
}

/** The service answered a recording, but refused one of its turns: the reason, the turn's
 * position in the request and the path of its bad field. */
export class TurnRejectedError extends TurnlakeError {
  readonly index: number;
  readonly field: string | undefined;

  constructor(message: string, index: number, field: string | undefined) {
    super(message);
    this.index = index;
    this.field = field;
  }
}

/** An error answer of the service: its HTTP status, and its error code, message and field. */
export class ApiError extends TurnlakeError {
  /** The HTTP status (400, 401, 403, 404, 409, 410, 413, 415, 422, 429, 500, 503, ...). */
  readonly status: number;
  /** The service's error code, such as `unauthenticated`, `invalid_request`. */
  readonly code: string;
  /** The request field the error is about, when the service names one. */
  readonly field: string | undefined;
  /** The method and path of the request. */
  readonly request: string;

  constructor(status: number, code: string, message: string, field: string | undefined,
              request: string) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
    this.request = request;
  }
}

/** 400: the request asks for something the service refuses (a bad option, ref or time). */
export class BadRequestError extends ApiError {}
/** 401: no key, or a key the service does not know or that was revoked. */
export class UnauthorizedError extends ApiError {}
/** 403: the key may not do this (its role, its user, its tenant). */
export class ForbiddenError extends ApiError {}
/** 404: no such turn or file (for an end user's key: or not theirs). */
export class NotFoundError extends ApiError {}
/** 409: a concurrent write got in the way; trying again may succeed. */
export class ConflictError extends ApiError {}
/** 410: the file's bytes are past their retention. */
export class GoneError extends ApiError {}
/** 413: the body is over the service's limit; send fewer turns per call. */
export class PayloadTooLargeError extends ApiError {}
/** 415: the body's content type is not one the route reads. */
export class UnsupportedMediaTypeError extends ApiError {}
/** 422: the body or a parameter does not fit the contract (`field` names it). */
export class UnprocessableEntityError extends ApiError {}
/** 429: too many requests; retried with backoff before it reaches the caller. */
export class RateLimitedError extends ApiError {}
/** 500: the service failed; its log has the details. */
export class ServerError extends ApiError {}
/** 503: the lake, an index or the embedding model is unavailable now; retried first. */
export class ServiceUnavailableError extends ApiError {}

const BY_STATUS: Record<number, typeof ApiError> = {
  400: BadRequestError,
  401: UnauthorizedError,
  403: ForbiddenError,
  404: NotFoundError,
  409: ConflictError,
  410: GoneError,
  413: PayloadTooLargeError,
  415: UnsupportedMediaTypeError,
  422: UnprocessableEntityError,
  429: RateLimitedError,
  500: ServerError,
  503: ServiceUnavailableError,
};

/** The error of an answer with status >= 400, from its body (the service's error shape, or
 * whatever a proxy in between sent). */
export function errorOf(status: number, body: string, request: string): ApiError {
  const Class = BY_STATUS[status] ?? (status >= 500 ? ServerError : ApiError);
  let detail: { code?: unknown; message?: unknown; field?: unknown } | undefined;
  try {
    const parsed = JSON.parse(body) as { error?: typeof detail };
    detail = parsed && typeof parsed === "object" ? parsed.error : undefined;
  } catch {
    detail = undefined;
  }
  if (detail && typeof detail.code === "string" && typeof detail.message === "string") {
    const field = typeof detail.field === "string" ? detail.field : undefined;
    return new Class(status, detail.code, detail.message, field, request);
  }
  // Not the service's shape (a proxy's page, say): its start is the best message there is.
  const text = body.trim().slice(0, 300) || "(empty body)";
  return new Class(status, `http_${status}`, `HTTP ${status} from ${request}: ${text}`,
                   undefined, request);
}
