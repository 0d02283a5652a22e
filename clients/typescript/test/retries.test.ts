// Timeouts and retries, with a fault injector between the client and the real service.
import { createServer } from "node:net";
import { afterEach, expect, test } from "vitest";
import {
  RateLimitedError,
  ServiceUnavailableError,
  TurnlakeClient,
  ServerUnreachableError,
  TurnlakeTimeoutError,
} from "../src/index.js";
import { type Fault, type FaultyProxy, faultyProxy } from "./faulty.js";
import { served } from "./helpers.js";

let proxy: FaultyProxy | undefined;
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
});

async function through(faults: Fault[], options: { retries?: number; timeoutMs?: number } = {},
) {
  proxy = await faultyProxy(served.url, faults);
  return new TurnlakeClient({ url: proxy.url, key: served.keys.analyst, backoffMs: 10,
                              ...options });
}

test("503 and 429 are retried until the service answers", async () => {
  const client = await through([{ status: 503 }, { status: 429, retryAfter: "0" },
                                { status: 503 }]);
  const answer = await client.conversations();
  expect(Array.isArray(answer.conversations)).toBe(true);
  expect(proxy!.requests).toBe(4);
});

test("after the last retry the error is the service's, typed", async () => {
  const client = await through([{ status: 503 }, { status: 503 }, { status: 503 }],
                               { retries: 2 });
  const error = await client.conversations().catch((e: unknown) => e);
  expect(error).toBeInstanceOf(ServiceUnavailableError);
  expect(error).toMatchObject({ status: 503, code: "lake_unavailable",
                                message: "injected 503" });
  expect(proxy!.requests).toBe(3);
  const limited = await (await through([{ status: 429 }], { retries: 0 }))
    .conversations().catch((e: unknown) => e);
  expect(limited).toBeInstanceOf(RateLimitedError);
});

test("other errors are not retried", async () => {
  const client = await through([{ status: 500 }, { status: 500 }]);
  await expect(client.conversations()).rejects.toMatchObject({ status: 500 });
  expect(proxy!.requests).toBe(1);
});

test("a timed-out attempt is retried; the last one is a TurnlakeTimeoutError", async () => {
  const client = await through([{ status: "hang" }], { timeoutMs: 500 });
  expect(Array.isArray((await client.conversations()).conversations)).toBe(true);
  expect(proxy!.requests).toBe(2);
  await proxy!.close();
  const hanging = await through([{ status: "hang" }, { status: "hang" }],
                                { timeoutMs: 300, retries: 1 });
  const error = await hanging.conversations().catch((e: unknown) => e);
  expect(error).toBeInstanceOf(TurnlakeTimeoutError);
  expect(error).toBeInstanceOf(ServerUnreachableError);
  expect(error).toMatchObject({ timeoutMs: 300 });
});

test("connection errors are retried, then a ServerUnreachableError", async () => {
  // A port that was free a moment ago: nothing listens there.
  const port = await new Promise<number>((resolve) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const address = probe.address();
      probe.close(() => resolve(typeof address === "object" && address ? address.port : 0));
    });
  });
  let attempts = 0;
  const counting: typeof fetch = (input, init) => {
    attempts++;
    return fetch(input, init);
  };
  const client = new TurnlakeClient({ url: `http://127.0.0.1:${port}`, key: "k", retries: 2,
                                      backoffMs: 10, fetch: counting });
  const error = await client.search("anything").catch((e: unknown) => e);
  expect(error).toBeInstanceOf(ServerUnreachableError);
  expect((error as Error).message).toMatch(/ECONNREFUSED/);
  expect(attempts).toBe(3);
});
