// turnlake: record conversation turns in a turnlake service and search them.
export { TurnlakeClient } from "./client.js";
export type { FileContent, FileStream } from "./client.js";
export type { CallOptions, ClientOptions } from "./transport.js";
export {
  ApiError,
  AuthenticationError,
  BadRequestError,
  ConflictError,
  GoneError,
  InternalServerError,
  NotFoundError,
  PayloadTooLargeError,
  PermissionDeniedError,
  RateLimitError,
  ServiceUnavailableError,
  TurnlakeConnectionError,
  TurnlakeError,
  TurnlakeTimeoutError,
  UnprocessableError,
  UnsupportedMediaTypeError,
} from "./errors.js";
export type * from "./types.js";
export type { components, paths } from "./generated/openapi.js";
