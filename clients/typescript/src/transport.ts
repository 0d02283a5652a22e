// One HTTP exchange with the service: the key, a timeout per attempt, and retries with
// backoff on connection errors, timeouts, 429 and 503 (safe: recording is idempotent, the
// rest reads, or erases what is already gone the second time).
import {
  ServerUnreachableError,
  TurnlakeError,
  TurnlakeTimeoutError,
  errorOf,
} from "./errors.js";

/** How the client reaches the service. */
export interface ClientOptions {
  /** The service's base URL (default `http://127.0.0.1:8700`, `turnlake serve`'s). */
  url?: string;
  /** An API key from `turnlake keys create`. */
  key?: string;
  /** Milliseconds an attempt may take until its answer is read (default 30 000). */
  timeoutMs?: number;
  /** Attempts after the first on connection errors, timeouts, 429 and 503 (default 3). */
  retries?: number;
  /** The first retry's wait in milliseconds, doubled each retry, with jitter (default 250). */
  backoffMs?: number;
  /** The longest wait between attempts in milliseconds (default 8 000). */
  maxBackoffMs?: number;
  /** The fetch to use (default: the global fetch). */
  fetch?: typeof fetch;
}

/** What one call may change. */
export interface CallOptions {
  /** Aborts the call. */
  signal?: AbortSignal;
  /** This call's timeout per attempt (default: the client's). */
  timeoutMs?: number;
}

export interface Exchange {
  method: "GET" | "POST" | "DELETE";
  path: string;
  query?: Record<string, unknown>;
  body?: string;
  contentType?: string;
  call?: CallOptions;
}

const RETRY_STATUSES = new Set([429, 503]);

export class Transport {
  readonly url: string;
  private readonly key: string | undefined;
  private readonly timeoutMs: number;
  private readonly retries: number;
  private readonly backoffMs: number;
  private readonly maxBackoffMs: number;
  private readonly fetcher: typeof fetch;

  constructor(options: ClientOptions) {
    this.url = (options.url ?? "http://127.0.0.1:8700").replace(/\/+$/, "");
    this.key = options.key;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.retries = Math.max(0, options.retries ?? 3);
    this.backoffMs = options.backoffMs ?? 250;
    this.maxBackoffMs = options.maxBackoffMs ?? 8_000;
    this.fetcher = options.fetch ?? globalThis.fetch;
  }

  /** The parsed JSON answer of a call; an ApiError for an error answer. */
  async json<T>(exchange: Exchange): Promise<T> {
    return this.send(exchange, async (response) => (await response.json()) as T, true);
  }

  /** The raw answer of a call whose body the caller reads (the timeout stops at its
   * headers, so a long download is not cut off). */
  async raw(exchange: Exchange): Promise<Response> {
    return this.send(exchange, async (response) => response, false);
  }

  private async send<T>(exchange: Exchange, read: (response: Response) => Promise<T>,
                        timeBody: boolean): Promise<T> {
    const target = `${exchange.method} ${exchange.path}`;
    const timeoutMs = exchange.call?.timeoutMs ?? this.timeoutMs;
    for (let attempt = 0; ; attempt++) {
      const last = attempt >= this.retries;
      const timeout = new AbortController();
      const timer = setTimeout(() => timeout.abort(), timeoutMs);
      const signal = exchange.call?.signal
        ? AbortSignal.any([exchange.call.signal, timeout.signal])
        : timeout.signal;
      let response: Response;
      try {
        response = await this.fetcher(this.address(exchange), {
          method: exchange.method,
          headers: this.headers(exchange),
          body: exchange.body,
          signal,
        });
      } catch (error) {
        clearTimeout(timer);
        if (exchange.call?.signal?.aborted) throw error;
        if (last && timeout.signal.aborted) {
          throw new TurnlakeTimeoutError(
            `${target} got no answer within ${timeoutMs} ms (${attempt + 1} attempts)`,
            timeoutMs, { cause: error });
        }
        if (last) {
          throw new ServerUnreachableError(
            `could not reach turnlake at ${this.url} (${target}): ${reasonOf(error)}`,
            { cause: error });
        }
        await sleep(this.wait(attempt, null), exchange.call?.signal);
        continue;
      }
      try {
        if (response.ok) {
          if (!timeBody) clearTimeout(timer);
          return await read(response);
        }
        const body = await response.text();
        if (!last && RETRY_STATUSES.has(response.status)) {
          clearTimeout(timer);
          await sleep(this.wait(attempt, response.headers.get("retry-after")),
                      exchange.call?.signal);
          continue;
        }
        throw errorOf(response.status, body, target);
      } catch (error) {
        if (timeout.signal.aborted && !(error instanceof TurnlakeError)) {
          throw new TurnlakeTimeoutError(
            `${target}: the answer was not read within ${timeoutMs} ms`, timeoutMs,
            { cause: error });
        }
        throw error;
      } finally {
        clearTimeout(timer);
      }
    }
  }

  private address(exchange: Exchange): string {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(exchange.query ?? {})) {
      if (value === undefined || value === null) continue;
      for (const each of Array.isArray(value) ? value : [value]) params.append(name, String(each));
    }
    const query = params.toString();
    return `${this.url}${exchange.path}${query ? `?${query}` : ""}`;
  }

  private headers(exchange: Exchange): Record<string, string> {
    const headers: Record<string, string> = { Accept: "application/json" };
    if (this.key) headers.Authorization = `Bearer ${this.key}`;
    if (exchange.body !== undefined) {
      headers["Content-Type"] = exchange.contentType ?? "application/json";
    }
    return headers;
  }

  /** The wait before retry `attempt + 1`: the server's Retry-After when it gives one,
   * else exponential backoff with full jitter; at most maxBackoffMs either way. */
  private wait(attempt: number, retryAfter: string | null): number {
    const seconds = retryAfter === null ? Number.NaN : Number(retryAfter);
    if (Number.isFinite(seconds) && seconds >= 0) {
      return Math.min(seconds * 1000, this.maxBackoffMs);
    }
    const ceiling = Math.min(this.backoffMs * 2 ** attempt, this.maxBackoffMs);
    return ceiling / 2 + Math.random() * (ceiling / 2);
  }
}

function reasonOf(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } })?.cause;
  if (cause?.code) return cause.code;
  if (cause?.message) return cause.message;
  return error instanceof Error ? error.message : String(error);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
