// turnlake: record conversation turns in a turnlake service and search them.
export { TurnlakeClient, rejectionOf } from "./client.js";
export type { FileContent, FileStream } from "./client.js";
export type { CallOptions, ClientOptions } from "./transport.js";
export {
  ApiError,
  BadRequestError,
  ConflictError,
  ForbiddenError,
  GoneError,
  NotFoundError,
  PayloadTooLargeError,
  RateLimitedError,
  ServerError,
  ServerUnreachableError,
  ServiceUnavailableError,
  TurnRejectedError,
  TurnlakeError,
  TurnlakeTimeoutError,
  UnauthorizedError,
  UnprocessableEntityError,
  UnsupportedMediaTypeError,
} from "./errors.js";
export type * from "./types.js";
export type { components, paths } from "./generated/openapi.js";
