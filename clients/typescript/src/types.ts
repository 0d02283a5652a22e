// The request and answer types of the client, read from the generated OpenAPI types by route
// and method (src/generated/openapi.ts): regenerating them (`make ts-types`) carries every
// change of the service's contract here, with no copy to keep in step.
import type { components, paths } from "./generated/openapi.js";

type Operation<P extends keyof paths, M extends keyof paths[P]> = NonNullable<paths[P][M]>;

/** The JSON body an operation takes. */
type JsonBody<O> = O extends { requestBody?: { content: { "application/json": infer B } } }
  ? B
  : never;

/** The JSON answer of an operation's 200; an object of any fields while the document says
 * nothing more (`unknown`). */
type JsonAnswer<O> = O extends { responses: { 200: { content: { "application/json": infer A } } } }
  ? unknown extends A
    ? Record<string, unknown>
    : A
  : never;

/** The query parameters of an operation. */
type QueryOf<O> = O extends { parameters: { query?: infer Q } } ? NonNullable<Q> : never;

type RecordTurns = Operation<"/v1/turns", "post">;
type Search = Operation<"/v1/search", "post">;
type Catalog = Operation<"/v1/catalog", "get">;
type Conversations = Operation<"/v1/conversations", "get">;
type Turn = Operation<"/v1/conversations/{conversation}/turns/{turn}", "get">;
type Pull = Operation<"/v1/pull", "post">;
type EraseConversation = Operation<"/v1/conversations/{conversation}", "delete">;

/** One `turnlake.turn.v1` record (the body of `POST /v1/turns` for one turn). */
export type TurnRecord = Exclude<JsonBody<RecordTurns>, { turns: unknown }>;
/** What `POST /v1/turns` answers: counts and each turn's outcome. */
export type RecordAnswer = JsonAnswer<RecordTurns>;
/** What became of one turn of a recording. */
export type TurnOutcome = RecordAnswer["turns"][number];

/** Every option of `POST /v1/search` (the principal is the key's). */
export type SearchOptions = JsonBody<Search>;
/** A search's answer: hits best first, warnings, the times the query named. */
export type SearchAnswer = JsonAnswer<Search>;
/** One matched turn. */
export type Hit = SearchAnswer["hits"][number];

/** The query of `GET /v1/catalog`. */
export type CatalogOptions = QueryOf<Catalog>;
export type CatalogAnswer = JsonAnswer<Catalog>;
export type CatalogTurn = CatalogAnswer["turns"][number];

/** The query of `GET /v1/conversations`. */
export type ConversationsOptions = QueryOf<Conversations>;
export type ConversationsAnswer = JsonAnswer<Conversations>;
export type Conversation = ConversationsAnswer["conversations"][number];

/** The query of `GET /v1/conversations/{conversation}/turns/{turn}`. */
export type TurnOptions = QueryOf<Turn>;
/** One turn materialized from its TurnLog: messages, file cards, steps, citations, events. */
export type TurnAnswer = JsonAnswer<Turn>;

/** The body of `POST /v1/pull`. */
export type PullOptions = JsonBody<Pull>;
export type PullAnswer = JsonAnswer<Pull>;

/** What an erasure planned and removed. */
export type ErasureAnswer = JsonAnswer<EraseConversation>;

/** The service's one error shape: `{"error": {"code", "message", "field"?}}`. */
export type ErrorAnswer = RecordTurns["responses"] extends {
  401: { content: { "application/json": infer E } };
}
  ? E
  : never;

/** What a non-file `conv:*` address resolves to: the object (`value`) and where it lives. */
export type ResolvedRecord = components["schemas"]["ResolvedRecord"];
