// The turnlake client: every operation of the service, typed from its OpenAPI document.
import { TurnRejectedError } from "./errors.js";
import { type CallOptions, type ClientOptions, Transport } from "./transport.js";
import type {
  CatalogAnswer,
  CatalogOptions,
  ConversationsAnswer,
  ConversationsOptions,
  ErasureAnswer,
  PullAnswer,
  PullOptions,
  RecordAnswer,
  ResolvedRecord,
  SearchAnswer,
  SearchOptions,
  TurnAnswer,
  TurnOptions,
  TurnRecord,
} from "./types.js";

/** A hosted file's bytes, with what the service says about them. */
export interface FileContent {
  bytes: Uint8Array;
  /** The file's media type. */
  contentType: string;
  /** The file's name (from Content-Disposition), when the service gives one. */
  name: string | undefined;
}

/** A hosted file's bytes as a stream, to read once. */
export interface FileStream {
  stream: ReadableStream<Uint8Array>;
  contentType: string;
  name: string | undefined;
  /** The byte count the service announced, when it did. */
  size: number | undefined;
}

/** A client of one turnlake service, acting with one API key. */
export class TurnlakeClient {
  private readonly http: Transport;

  constructor(options: ClientOptions) {
    this.http = new Transport(options);
  }

  /** The service's base URL. */
  get url(): string {
    return this.http.url;
  }

  /** Record one turn (sent as JSON) or several (an array or any iterable, sent as one
   * NDJSON request); recorder or admin keys. Each turn's outcome is in the answer, in
   * order: `accepted`, `duplicate` (its ids are recorded already, so sending again is always
   * safe) or `rejected` with the reason and the path of the bad field; a rejected turn does
   * not stop the others. `rejectionOf(answer)` makes the first rejection an error. */
  async record(turns: TurnRecord | Iterable<TurnRecord>, call?: CallOptions,
  ): Promise<RecordAnswer> {
    if (!isIterable(turns)) {
      return this.http.json<RecordAnswer>({
        method: "POST", path: "/v1/turns", body: JSON.stringify(turns), call,
      });
    }
    const lines: string[] = [];
    for (const turn of turns) lines.push(JSON.stringify(turn));
    if (lines.length === 0) throw new TypeError("record() needs at least one turn");
    return this.http.json<RecordAnswer>({
      method: "POST", path: "/v1/turns", body: `${lines.join("\n")}\n`,
      contentType: "application/x-ndjson", call,
    });
  }

  /** Search what the key may read: a query, or every option of `POST /v1/search`. */
  async search(query: string | SearchOptions, options?: Omit<SearchOptions, "query">,
               call?: CallOptions): Promise<SearchAnswer> {
    const body = typeof query === "string" ? { ...options, query } : { ...query, ...options };
    return this.http.json<SearchAnswer>({
      method: "POST", path: "/v1/search", body: JSON.stringify(body), call,
    });
  }

  /** A conversation's turns in order, or turns looked up by ordinal or time phrase. */
  async catalog(options: CatalogOptions, call?: CallOptions): Promise<CatalogAnswer> {
    return this.http.json<CatalogAnswer>({
      method: "GET", path: "/v1/catalog", query: options, call,
    });
  }

  /** Conversations with at least one live turn, most recent activity first. */
  async conversations(options: ConversationsOptions = {}, call?: CallOptions,
  ): Promise<ConversationsAnswer> {
    return this.http.json<ConversationsAnswer>({
      method: "GET", path: "/v1/conversations", query: options, call,
    });
  }

  /** One turn as recorded: messages, file cards (with their refs), steps, citations,
   * events. */
  async turn(conversation: string, turn: string, options: TurnOptions = {},
             call?: CallOptions): Promise<TurnAnswer> {
    return this.http.json<TurnAnswer>({
      method: "GET", path: `/v1/conversations/${segment(conversation)}/turns/${segment(turn)}`,
      query: options, call,
    });
  }

  /** What a `conv:*` address names (a hit's `address` or `turn_address`, one of a turn's
   * `addresses`, a ref written in a text), as JSON: the record or a part of it, a step, a
   * search row, an event. `file` reads a `conv:fi:` ref's bytes. */
  async resolve(address: string, options: { as_of?: string } = {},
                call?: CallOptions): Promise<ResolvedRecord> {
    if (address.startsWith("conv:fi:")) {
      throw new TypeError(`${address} names a file's bytes: read them with file(ref)`);
    }
    return this.http.json<ResolvedRecord>({
      method: "GET", path: `/v1/refs/${refPath(address)}`, query: options, call,
    });
  }

  /** The bytes of a hosted file by its `conv:fi:` ref. */
  async file(ref: string, call?: CallOptions): Promise<FileContent> {
    const { stream, ...about } = await this.fileStream(ref, call);
    const bytes = new Uint8Array(await new Response(stream).arrayBuffer());
    return { bytes, contentType: about.contentType, name: about.name };
  }

  /** The bytes of a hosted file as a stream (for large files: nothing is held whole). */
  async fileStream(ref: string, call?: CallOptions): Promise<FileStream> {
    const response = await this.http.raw({ method: "GET", path: `/v1/refs/${refPath(ref)}`,
                                           call });
    const length = response.headers.get("content-length");
    return {
      stream: response.body ?? new Response(new Uint8Array()).body!,
      contentType: response.headers.get("content-type") ?? "application/octet-stream",
      name: fileName(response.headers.get("content-disposition")),
      size: length === null ? undefined : Number(length),
    };
  }

  /** Copy files (refs, or every file of `CONVERSATION/TURN`) into a folder below the
   * server's workspace (`turnlake serve --workspace DIR`). */
  async pull(options: PullOptions, call?: CallOptions): Promise<PullAnswer> {
    return this.http.json<PullAnswer>({
      method: "POST", path: "/v1/pull", body: JSON.stringify(options), call,
    });
  }

  /** Erase one conversation of the key's tenant now (admin keys). */
  async eraseConversation(conversation: string, call?: CallOptions): Promise<ErasureAnswer> {
    return this.http.json<ErasureAnswer>({
      method: "DELETE", path: `/v1/conversations/${segment(conversation)}`, call,
    });
  }

  /** Erase everything of one user of the key's tenant now (admin keys). */
  async eraseUser(user: string, call?: CallOptions): Promise<ErasureAnswer> {
    return this.http.json<ErasureAnswer>({
      method: "DELETE", path: `/v1/users/${segment(user)}`, call,
    });
  }

  /** Liveness (no key needed). */
  async health(call?: CallOptions): Promise<{ status: string }> {
    return this.http.json<{ status: string }>({ method: "GET", path: "/healthz", call });
  }
}

/** The error of a recording's first rejected turn, or undefined when none was. */
export function rejectionOf(answer: RecordAnswer): TurnRejectedError | undefined {
  const outcome = answer.turns.find((turn) => turn.status === "rejected");
  if (outcome === undefined) return undefined;
  const where = outcome.turn_id ? `${outcome.conversation_id}/${outcome.turn_id}`
    : `#${outcome.index}`;
  return new TurnRejectedError(`turn ${where} was rejected: ${outcome.reason ?? "(no reason)"}`,
                               outcome.index, outcome.field ?? undefined);
}

function isIterable(value: unknown): value is Iterable<TurnRecord> {
  return typeof value === "object" && value !== null && Symbol.iterator in value;
}

function segment(value: string): string {
  return encodeURIComponent(value);
}

/** A ref in the path: its `:` and `/` kept (the route takes the rest of the path). */
function refPath(ref: string): string {
  return ref.split("/").map((part) => encodeURIComponent(part).replace(/%3A/gi, ":")).join("/");
}

function fileName(disposition: string | null): string | undefined {
  if (!disposition) return undefined;
  const encoded = /filename\*=UTF-8''([^;]+)/i.exec(disposition);
  if (encoded?.[1]) {
    try {
      return decodeURIComponent(encoded[1]);
    } catch {
      return encoded[1];
    }
  }
  return /filename="?([^";]+)"?/i.exec(disposition)?.[1];
}
