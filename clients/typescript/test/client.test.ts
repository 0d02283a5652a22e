// The client against a real `turnlake serve`: every operation, and the errors of each kind.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import {
  UnauthorizedError,
  BadRequestError,
  NotFoundError,
  PayloadTooLargeError,
  ForbiddenError,
  TurnRejectedError,
  TurnlakeClient,
  UnprocessableEntityError,
  rejectionOf,
} from "../src/index.js";
import { clientAs, served, turnRecord, waitUntil } from "./helpers.js";

const recorder = clientAs("recorder");
const user = clientAs("user");
const analyst = clientAs("analyst");

describe("recording", () => {
  test("one turn is accepted, then a duplicate", async () => {
    const turn = turnRecord(1, "quokka", { conversation: "rec-1" });
    const first = await recorder.record(turn);
    expect(first).toMatchObject({ accepted: 1, duplicates: 0, rejected: 0 });
    expect(first.turns[0]).toMatchObject({
      status: "accepted", conversation_id: "rec-1", turn_id: "t-0001" });
    expect((await recorder.record(turn)).turns[0]?.status).toBe("duplicate");
    expect(rejectionOf(first)).toBeUndefined();
  });

  test("many turns go as NDJSON, each with its outcome", async () => {
    const bad = { ...turnRecord(3, "x", { conversation: "rec-2" }), submissions: [] };
    // Any iterable: a generator here.
    const turns = function* () {
      yield turnRecord(1, "ibex", { conversation: "rec-2" });
      yield bad;
      yield turnRecord(2, "ibex", { conversation: "rec-2" });
    };
    const answer = await recorder.record(turns());
    expect(answer).toMatchObject({ accepted: 2, duplicates: 0, rejected: 1 });
    expect(answer.turns.map((t) => t.status)).toEqual(["accepted", "rejected", "accepted"]);
    expect(answer.turns[1]?.field).toBe("submissions");
  });

  test("a rejected turn's outcome names the field; rejectionOf makes it an error", async () => {
    const bad = { ...turnRecord(4, "x", { conversation: "rec-3" }), turn_id: "no spaces" };
    const answer = await recorder.record(bad);
    expect(answer.turns[0]).toMatchObject({ status: "rejected", field: "turn_id" });
    const error = rejectionOf(answer);
    expect(error).toBeInstanceOf(TurnRejectedError);
    expect(error).toMatchObject({ index: 0, field: "turn_id" });
    expect(error?.message).toMatch(/^turn rec-3\/no spaces was rejected: turn_id: /);
  });

  test("a key that may not record gets a ForbiddenError", async () => {
    const error = await user.record(turnRecord(5, "x")).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ForbiddenError);
    expect(error).toMatchObject({ status: 403, code: "forbidden" });
    expect((error as Error).message).toMatch(/record/);
  });

  test("a body over the limit gets a PayloadTooLargeError", async () => {
    const huge = turnRecord(6, "x".repeat(11 * 1024 * 1024), { conversation: "rec-4" });
    const error = await recorder.record(huge).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PayloadTooLargeError);
    expect(error).toMatchObject({ status: 413, code: "payload_too_large" });
  });
});

describe("reading", async () => {
  const word = "narwhal";
  await recorder.record([
    turnRecord(10, word, { conversation: "read-1", file: "day,amount\nmon,3\n" }),
    turnRecord(11, word, { conversation: "read-1" }),
    turnRecord(12, word, { conversation: "read-2", user: "u-ben" }),
  ]);
  const seeded = ["read-1/t-0010", "read-1/t-0011", "read-2/t-0012"];
  const searchable = await waitUntil(async () => {
    const { hits } = await analyst.search(word, { scope: "tenant", max_per_conversation: 0 });
    const found = new Set(hits.map((h) => `${h.conversation_id}/${h.turn_id}`));
    return seeded.every((turn) => found.has(turn));
  });

  test("the turns become searchable", () => {
    expect(searchable).toBe(true);
  });

  test("search with options", async () => {
    const own = await user.search({ query: word, id: "q1" });
    expect(own.id).toBe("q1");
    // A user key reads its own user's turns only.
    expect(new Set(own.hits.map((h) => h.user_id))).toEqual(new Set(["u-ana"]));
    expect(own.hits.map((h) => h.conversation_id)).toContain("read-1");
    const one = await analyst.search(word, { scope: "tenant", k: 1, snippets: "none" });
    expect(one.hits).toHaveLength(1);
    const ben = await analyst.search(word, { user: "u-ben" });
    expect(ben.hits.map((h) => h.turn_id)).toEqual(["t-0012"]);
    const later = await analyst.search(word, { scope: "tenant", since: "2027-01-01" });
    expect(later.hits).toEqual([]);
    const conversation = await analyst.search(word, { scope: "conversation",
                                                      conversation: "read-1" });
    expect(new Set(conversation.hits.map((h) => h.conversation_id))).toEqual(new Set(["read-1"]));
  });

  test("a bad option is an UnprocessableEntityError naming the field", async () => {
    const error = await user.search(word, { k: 0 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UnprocessableEntityError);
    expect(error).toMatchObject({ status: 422, code: "invalid_request", field: "k" });
  });

  test("catalog and conversations", async () => {
    const catalog = await user.catalog({ conversation: "read-1" });
    expect(catalog.turns.map((t) => t.turn_id)).toEqual(["t-0010", "t-0011"]);
    const last = await user.catalog({ conversation: "read-1", ordinal: -1 });
    expect(last.turns.map((t) => t.turn_id)).toEqual(["t-0011"]);
    const listed = await user.conversations();
    expect(listed.conversations.map((c) => c.conversation_id)).toContain("read-1");
    expect(listed.conversations.map((c) => c.user_id)).not.toContain("u-ben");
    const error = await user.catalog({}).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BadRequestError);
    expect(error).toMatchObject({ status: 400, code: "invalid_request" });
  });

  test("a turn, its file's bytes, and a pull", async () => {
    const turn = await user.turn("read-1", "t-0010");
    const files = turn.files as Array<{ ref: string }>;
    expect(files).toHaveLength(1);
    const ref = files[0]!.ref;
    const file = await user.file(ref);
    expect(new TextDecoder().decode(file.bytes)).toBe("day,amount\nmon,3\n");
    expect(file.contentType).toMatch(/^text\/csv/);
    expect(file.name).toBe("report.csv");
    const record = await user.resolve(turn.addresses!.record);
    expect(record.namespace).toBe("ar");
    expect((record.value as { turn_id: string }).turn_id).toBe("t-0010");
    await expect(user.resolve(ref)).rejects.toThrow(TypeError);
    const streamed = await user.fileStream(ref);
    expect(streamed.size).toBe(file.bytes.length);
    expect(await new Response(streamed.stream).text()).toBe("day,amount\nmon,3\n");

    const pulled = await user.pull({ targets: [ref], into: "pulled" });
    expect(pulled.ok).toBe(true);
    const path = pulled.items[0]?.path;
    expect(path).toBeTruthy();
    const onDisk = [join(served.workspace, "pulled", path!), path!].find((p) => existsSync(p));
    expect(onDisk && readFileSync(onDisk, "utf8")).toBe("day,amount\nmon,3\n");
  });

  test("another user's turn and file are refused, a missing turn is not found", async () => {
    const theirs = await user.turn("read-2", "t-0012").catch((e: unknown) => e);
    expect(theirs).toBeInstanceOf(ForbiddenError);
    const missing = await analyst.turn("read-1", "t-9999").catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(NotFoundError);
    expect(missing).toMatchObject({ status: 404, code: "not_found" });
  });

  test("erasing: admin keys only", async () => {
    const refused = await analyst.eraseConversation("read-2").catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ForbiddenError);
    const erased = await clientAs("admin").eraseConversation("read-2");
    expect(erased.job_id).toBeTruthy();
    expect(Object.values(erased.deleted).reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    const gone = await analyst.turn("read-2", "t-0012").catch((e: unknown) => e);
    expect(gone).toBeInstanceOf(NotFoundError);
    const user = await clientAs("admin").eraseUser("u-nobody");
    expect(user.job_id).toBeTruthy();
  });
});

test("an unknown key gets an UnauthorizedError with the service's message", async () => {
  const stranger = new TurnlakeClient({ url: served.url, key: "tl_not_a_key" });
  const error = await stranger.search("anything").catch((e: unknown) => e);
  expect(error).toBeInstanceOf(UnauthorizedError);
  expect(error).toMatchObject({ status: 401, code: "unauthenticated" });
  expect((error as Error).message.length).toBeGreaterThan(0);
});

test("health answers without a key", async () => {
  const answer = await new TurnlakeClient({ url: served.url }).health();
  expect(answer.status).toBe("ok");
});
