// The Vercel AI SDK adapter (`turnlake/ai`): tools that let a model search the user's
// history and read a turn, and a recorder that writes each generation as a turnlake turn
// from the SDK's onFinish event.
import { tool } from "ai";
import { z } from "zod";
import { type TurnlakeClient, rejectionOf } from "./client.js";
import type { Hit, SearchOptions, TurnOutcome, TurnRecord } from "./types.js";

// ---------------------------------------------------------------------------------------
// Tools

/** What every search of the tools shares; the model chooses the query (and may narrow). */
export interface HistoryToolsOptions {
  /** Search options fixed for every call (an analyst key's `user`, `scope`, `roles`...). */
  search?: Partial<Omit<SearchOptions, "query">>;
  /** The most hits a call returns (default 5; the model may ask for fewer or up to 20). */
  k?: number;
  /** Characters of each hit's text given to the model (default 500). */
  textChars?: number;
}

/** A hit as the tools give it to a model: where it is, when, how relevant, what it says —
 * not the scoring internals, which cost tokens and tell a model nothing. */
export interface HistoryHit {
  conversation_id: string;
  turn_id: string;
  turn_at: string;
  relevance: number;
  role: string;
  text: string;
  snippets: Record<string, string>;
}

/** `search_history` and `get_turn`: tools for `generateText` / `streamText`. */
export function historyTools(client: TurnlakeClient, options: HistoryToolsOptions = {}) {
  const most = options.k ?? 5;
  const chars = options.textChars ?? 500;
  return {
    search_history: tool({
      description: "Search the user's earlier conversations with this assistant. Returns the "
        + "best matching turns (conversation_id, turn_id, when, relevance 0-1, text); an empty "
        + "list means nothing earlier matches. Use get_turn to read a whole turn.",
      inputSchema: z.object({
        query: z.string().min(1).describe("What to look for, in the user's words."),
        k: z.number().int().min(1).max(20).optional()
          .describe(`How many turns to return (default ${most}).`),
        since: z.string().optional().describe("Only turns at or after this ISO 8601 time."),
        until: z.string().optional().describe("Only turns before this ISO 8601 time."),
      }),
      execute: async ({ query, k, since, until }): Promise<{ hits: HistoryHit[];
                                                             warnings: string[] }> => {
        const answer = await client.search({
          ...options.search, query, k: k ?? most,
          ...(since === undefined ? {} : { since }), ...(until === undefined ? {} : { until }),
        });
        return { hits: answer.hits.map((hit) => compactHit(hit, chars)),
                 warnings: answer.warnings ?? [] };
      },
    }),
    get_turn: tool({
      description: "Read one earlier turn in full (its messages, files, steps), by the "
        + "conversation_id and turn_id a search_history hit gave.",
      inputSchema: z.object({
        conversation_id: z.string().min(1),
        turn_id: z.string().min(1),
      }),
      execute: async ({ conversation_id, turn_id }) => client.turn(conversation_id, turn_id),
    }),
  };
}

function compactHit(hit: Hit, chars: number): HistoryHit {
  return {
    conversation_id: hit.conversation_id, turn_id: hit.turn_id, turn_at: hit.turn_at,
    relevance: hit.relevance, role: hit.role, text: hit.text.slice(0, chars),
    snippets: Object.fromEntries(Object.entries(hit.snippets ?? {})
      .map(([role, text]) => [role, text.slice(0, chars)])),
  };
}

// ---------------------------------------------------------------------------------------
// Recording

/** Who and where the recorded turns belong to (the key's tenant). */
export interface TurnIdentity {
  tenant: string;
  app: string;
  agent: string;
  userId: string;
  conversationId: string;
  /** The conversation's title. */
  title?: string;
}

/** A message as the SDK passes it (`ModelMessage`): its role and its text or parts. */
export interface MessageLike {
  role: string;
  content: string | ReadonlyArray<{ type: string; text?: string }>;
}

/** The user input of one generation: what the SDK call was given. */
export interface GenerationInput {
  /** The `prompt` of the call. */
  prompt?: string | ReadonlyArray<MessageLike>;
  /** The `messages` of the call: the user messages after the last assistant message are
   * this turn's submissions (the first a prompt, the rest follow-ups). */
  messages?: ReadonlyArray<MessageLike>;
  /** The turn's id (default: a fresh one). */
  turnId?: string;
  /** When the turn started (default: when onFinish(...) or begin was called). */
  startedAt?: Date;
}

interface PartLike {
  type: string;
  toolName?: string;
  input?: unknown;
  output?: unknown;
  error?: unknown;
}

interface StepLike {
  content?: ReadonlyArray<PartLike>;
  response?: { timestamp?: Date };
}

interface UsageLike {
  inputTokens?: number | undefined;
  outputTokens?: number | undefined;
}

/** What the recorder reads of a finished generation: the onFinish event of `generateText`
 * or `streamText`, or `generateText`'s result. */
export interface FinishedGeneration {
  text: string;
  finishReason?: string;
  steps?: ReadonlyArray<StepLike>;
  totalUsage?: UsageLike;
  usage?: UsageLike;
  sources?: ReadonlyArray<{ sourceType?: string; url?: string; title?: string }>;
}

export interface RecorderOptions {
  /** Called with each recorded turn's outcome (accepted, or duplicate when sent twice). */
  onRecorded?: (outcome: TurnOutcome, record: TurnRecord) => void;
  /** Called when recording a turn fails. Without it the failure is written to the console
   * and thrown by the next flush(): the SDK ignores what an onFinish callback throws, so a
   * lost turn would otherwise leave no sign. */
  onError?: (error: unknown, record: TurnRecord) => void;
  /** Characters of a tool call's input or output kept in its step (default 500). */
  detailChars?: number;
}

/** Records each generation as one turn of a conversation. */
export class GenerationRecorder {
  private readonly pending = new Set<Promise<unknown>>();
  private failures: unknown[] = [];

  constructor(private readonly client: TurnlakeClient, private readonly identity: TurnIdentity,
              private readonly options: RecorderOptions = {}) {}

  /** An onFinish callback for one `generateText` / `streamText` call: give it the same
   * prompt or messages as the call. The turn starts now and ends when the call finishes. */
  onFinish(input: GenerationInput): (event: FinishedGeneration) => Promise<void> {
    const started = { ...input, startedAt: input.startedAt ?? new Date() };
    return async (event) => {
      const recording = this.record(started, event).catch((error: unknown) => {
        this.failures.push(error);
        console.error(`turnlake: a generation of conversation ${this.identity.conversationId} `
                      + `was not recorded: ${error instanceof Error ? error.message : error}`);
      });
      this.pending.add(recording);
      try {
        await recording;
      } finally {
        this.pending.delete(recording);
      }
    };
  }

  /** Wait for the recordings under way (a stream's onFinish runs after its text is read);
   * throws the first failure since the last flush that no onError took. */
  async flush(): Promise<void> {
    await Promise.all([...this.pending]);
    const [first, ...more] = this.failures;
    this.failures = [];
    if (first === undefined) return;
    if (more.length === 0) throw first;
    throw new AggregateError([first, ...more], `${more.length + 1} generations were not `
                             + "recorded");
  }

  /** Record a finished generation as a turn; returns its outcome (undefined when the
   * failure went to onError). Without onError, a failure is thrown. */
  async record(input: GenerationInput, finished: FinishedGeneration,
  ): Promise<TurnOutcome | undefined> {
    const record = generationRecord(this.identity, input, finished, new Date(),
                                    this.options.detailChars ?? 500);
    try {
      const answer = await this.client.record(record);
      const rejected = rejectionOf(answer);
      if (rejected) throw rejected;
      const outcome = answer.turns[0]!;
      this.options.onRecorded?.(outcome, record);
      return outcome;
    } catch (error) {
      if (!this.options.onError) throw error;
      this.options.onError(error, record);
      return undefined;
    }
  }
}

/** The `turnlake.turn.v1` record of a finished generation. */
export function generationRecord(identity: TurnIdentity, input: GenerationInput,
                                 finished: FinishedGeneration, endedAt: Date = new Date(),
                                 detailChars = 500): TurnRecord {
  const startedAt = input.startedAt ?? endedAt;
  const ended = endedAt < startedAt ? startedAt : endedAt;
  const texts = submissionsOf(input);
  if (texts.length === 0) {
    throw new TypeError("a turn needs the user's input: give onFinish/record the call's "
                        + "prompt or messages");
  }
  const at = (when: Date | undefined) => iso(clamp(when ?? ended, startedAt, ended));
  const steps: Array<{ name: string; status: "started" | "completed" | "failed"; at: string;
                       detail?: string }> = [];
  for (const step of finished.steps ?? []) {
    for (const part of step.content ?? []) {
      const name = `tool:${part.toolName ?? "tool"}`;
      const when = at(step.response?.timestamp);
      if (part.type === "tool-call") {
        steps.push({ name, status: "started", at: when, detail: brief(part.input, detailChars) });
      } else if (part.type === "tool-result") {
        steps.push({ name, status: "completed", at: when,
                     detail: brief(part.output, detailChars) });
      } else if (part.type === "tool-error") {
        steps.push({ name, status: "failed", at: when, detail: brief(part.error, detailChars) });
      }
    }
  }
  const usage = finished.totalUsage ?? finished.usage;
  const citations = (finished.sources ?? [])
    .filter((source) => source.sourceType === "url" && source.url)
    .map((source) => ({ title: source.title || source.url!, url: source.url! }));
  const record: Record<string, unknown> = {
    schema: "turnlake.turn.v1",
    tenant: identity.tenant, app: identity.app, agent: identity.agent,
    user_id: identity.userId, conversation_id: identity.conversationId,
    turn_id: input.turnId ?? newTurnId(),
    writer: "minimal",
    started_at: iso(startedAt), ended_at: iso(ended),
    submissions: texts.map((text, i) => ({
      text, event_type: i === 0 ? "prompt" : "followup", batch: 0, arrived_at: iso(startedAt),
    })),
    steps,
    citations,
    completion: {
      text: finished.text, at: iso(ended),
      ...(finished.finishReason === "error" ? { status: "failed" } : {}),
    },
    usage: {
      tokens_in: usage?.inputTokens ?? 0, tokens_out: usage?.outputTokens ?? 0,
      duration_ms: ended.getTime() - startedAt.getTime(),
    },
  };
  if (identity.title !== undefined) record.conversation_title = identity.title;
  return record as TurnRecord;
}

function submissionsOf(input: GenerationInput): string[] {
  if (typeof input.prompt === "string") return input.prompt.trim() ? [input.prompt] : [];
  const messages = input.messages ?? (Array.isArray(input.prompt) ? input.prompt : []);
  let lastAssistant = -1;
  messages.forEach((message, i) => {
    if (message.role === "assistant" || message.role === "tool") lastAssistant = i;
  });
  return messages.slice(lastAssistant + 1)
    .filter((message) => message.role === "user")
    .map(textOf)
    .filter((text) => text.trim() !== "");
}

function textOf(message: MessageLike): string {
  if (typeof message.content === "string") return message.content;
  return message.content.filter((part) => part.type === "text").map((part) => part.text ?? "")
    .join("");
}

function brief(value: unknown, chars: number): string {
  let text: string;
  if (typeof value === "string") text = value;
  else if (value instanceof Error) text = value.message;
  else {
    try {
      text = JSON.stringify(value) ?? String(value);
    } catch {
      text = String(value);
    }
  }
  return text.length > chars ? `${text.slice(0, chars - 1)}…` : text;
}

function clamp(when: Date, low: Date, high: Date): Date {
  return when < low ? low : when > high ? high : when;
}

function iso(when: Date): string {
  return when.toISOString();
}

function newTurnId(): string {
  return `t-${globalThis.crypto.randomUUID()}`;
}
