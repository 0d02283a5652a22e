// What the tests share: clients of the served service, records, and a bounded wait.
import { inject } from "vitest";
import { TurnlakeClient } from "../src/index.js";
import type { TurnRecord } from "../src/index.js";

export const served = inject("served");

/** A client of the served service acting with one of its keys. */
export function clientAs(who: keyof typeof served.keys, options: { timeoutMs?: number;
                         retries?: number } = {}): TurnlakeClient {
  return new TurnlakeClient({ url: served.url, key: served.keys[who], backoffMs: 20,
                              ...options });
}

/** A valid `turnlake.turn.v1` record of tenant acme whose texts carry `word`. */
export function turnRecord(n: number, word: string, options: { user?: string;
                           conversation?: string; file?: string } = {}): TurnRecord {
  const start = new Date(Date.UTC(2026, 2, 3, 9, 0) + 7 * 60_000 * n);
  const at = start.toISOString();
  const record: Record<string, unknown> = {
    schema: "turnlake.turn.v1", tenant: "acme", app: "support-desk", agent: "ts-agent",
    user_id: options.user ?? "u-ana", conversation_id: options.conversation ?? "ts-c1",
    turn_id: `t-${String(n).padStart(4, "0")}`, writer: "minimal",
    started_at: at, ended_at: new Date(start.getTime() + 40_000).toISOString(),
    submissions: [{ text: `${word} question about the ledger`, event_type: "prompt",
                    batch: 0, arrived_at: at }],
    completion: { text: `${word} answer: the ledger balances`,
                  at: new Date(start.getTime() + 30_000).toISOString() },
  };
  if (options.file !== undefined) {
    record.hosted_files = [{ path: "files/report.csv", mime: "text/csv",
                             content_b64: Buffer.from(options.file).toString("base64") }];
  }
  return record as TurnRecord;
}

/** Poll `check` until it is true; false once `timeoutMs` is up. */
// Generous: on a loaded machine the first index build of a month takes a while.
export async function waitUntil(check: () => Promise<boolean>, timeoutMs = 180_000,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return false;
}
