// The Vercel AI SDK adapter with the SDK's real package and a scripted model (no network):
// the model searches the user's history, reads the turn it found and answers; the recorder
// writes the generation as a turn, which search then finds.
import type { LanguageModelV3CallOptions, LanguageModelV3GenerateResult,
              LanguageModelV3StreamPart } from "@ai-sdk/provider";
import { generateText, stepCountIs, streamText } from "ai";
import { MockLanguageModelV3, convertArrayToReadableStream } from "ai/test";
import { describe, expect, test, vi } from "vitest";
import { ForbiddenError } from "../src/index.js";
import { GenerationRecorder, type TurnIdentity, historyTools } from "../src/ai.js";
import { clientAs, turnRecord, waitUntil } from "./helpers.js";

const user = clientAs("user");
const analyst = clientAs("analyst");
const identity = (conversationId: string): TurnIdentity => ({
  tenant: "acme", app: "support-desk", agent: "vercel-agent", userId: "u-ana",
  conversationId, title: "trip planning",
});
const usage = { inputTokens: { total: 30, noCache: 30, cacheRead: undefined,
                               cacheWrite: undefined },
                outputTokens: { total: 12, text: 12, reasoning: undefined } };

function toolCall(id: string, toolName: string, input: object): LanguageModelV3GenerateResult {
  return { content: [{ type: "tool-call", toolCallId: id, toolName,
                       input: JSON.stringify(input) }],
           finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] };
}

function answer(text: string): LanguageModelV3GenerateResult {
  return { content: [{ type: "text", text }], finishReason: { unified: "stop", raw: "stop" },
           usage, warnings: [] };
}

/** The output of the latest tool result in a call's prompt. */
function lastToolOutput(options: LanguageModelV3CallOptions): any {
  for (const message of [...options.prompt].reverse()) {
    if (message.role !== "tool") continue;
    for (const part of message.content) {
      if (part.type === "tool-result" && part.output.type === "json") return part.output.value;
    }
  }
  throw new Error("no tool result in the prompt");
}

/** A model that searches, reads the best hit's turn, then answers from it. */
function researcher(): MockLanguageModelV3 {
  let call = 0;
  return new MockLanguageModelV3({
    doGenerate: async (options) => {
      call++;
      if (call === 1) return toolCall("c1", "search_history", { query: "pelican budget" });
      if (call === 2) {
        const best = lastToolOutput(options).hits[0];
        return toolCall("c2", "get_turn", { conversation_id: best.conversation_id,
                                            turn_id: best.turn_id });
      }
      // The turn as get_turn gave it: its first user message is what the answer quotes.
      const asked = /"text":"([^"]*pelican[^"]*)"/.exec(JSON.stringify(lastToolOutput(options)));
      return answer(`Earlier you asked: ${asked?.[1] ?? "(nothing found)"} (cormorant summary)`);
    },
  });
}

describe("the adapter", async () => {
  await clientAs("recorder").record(turnRecord(40, "pelican budget", { conversation: "ai-old" }));
  const searchable = await waitUntil(async () =>
    (await user.search("pelican budget")).hits.some((h) => h.conversation_id === "ai-old"));

  test("the earlier turn is searchable", () => {
    expect(searchable).toBe(true);
  });

  test("a generation uses the tools and is recorded as a turn that search finds", async () => {
    const recorded: string[] = [];
    const recorder = new GenerationRecorder(clientAs("recorder"), identity("ai-new"), {
      onRecorded: (outcome) => recorded.push(`${outcome.status} ${outcome.turn_id}`),
    });
    const prompt = "What did I plan for the pelican budget?";
    const result = await generateText({
      model: researcher(), prompt, tools: historyTools(user), stopWhen: stepCountIs(5),
      onFinish: recorder.onFinish({ prompt, turnId: "t-ai-1" }),
    });
    expect(result.steps.map((s) => s.toolCalls.map((c) => c.toolName))).toEqual(
      [["search_history"], ["get_turn"], []]);
    // The tools gave the model the seeded turn: found by search, then read whole.
    const found = result.steps[0]!.toolResults[0]!.output as { hits: Array<Record<string, unknown>> };
    expect(found.hits[0]).toMatchObject({ conversation_id: "ai-old", turn_id: "t-0040" });
    expect(Object.keys(found.hits[0]!)).not.toContain("ranks");  // no scoring internals
    expect(result.text).toContain("cormorant summary");
    expect(result.text).toContain("pelican budget question");
    expect(recorded).toEqual(["accepted t-ai-1"]);

    const turn = await analyst.turn("ai-new", "t-ai-1");
    const steps = turn.steps as Array<{ name: string; status: string; detail?: string }>;
    expect(steps.map((s) => `${s.name} ${s.status}`)).toEqual([
      "tool:search_history started", "tool:search_history completed",
      "tool:get_turn started", "tool:get_turn completed"]);
    expect(steps[0]!.detail).toContain("pelican budget");
    const catalog = await analyst.catalog({ conversation: "ai-new" });
    expect(catalog.turns[0]).toMatchObject({ first_user_message: prompt,
                                             last_completion: result.text });
    expect(await waitUntil(async () => (await user.search("cormorant summary")).hits
      .some((h) => h.conversation_id === "ai-new" && h.turn_id === "t-ai-1"))).toBe(true);
  });

  test("a streamed generation's messages are recorded at its finish", async () => {
    const parts: LanguageModelV3StreamPart[] = [
      { type: "text-start", id: "1" },
      { type: "text-delta", id: "1", delta: "Streamed answer about " },
      { type: "text-delta", id: "1", delta: "flamingo routes" },
      { type: "text-end", id: "1" },
      { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage },
    ];
    const model = new MockLanguageModelV3({
      doStream: async () => ({ stream: convertArrayToReadableStream(parts) }),
    });
    const recorder = new GenerationRecorder(clientAs("recorder"), identity("ai-stream"));
    const messages = [
      { role: "user" as const, content: "an older question" },
      { role: "assistant" as const, content: "an older answer" },
      { role: "user" as const, content: "Which flamingo routes?" },
      { role: "user" as const, content: [{ type: "text" as const, text: "And the costs?" }] },
    ];
    const result = streamText({ model, messages,
                                onFinish: recorder.onFinish({ messages, turnId: "t-stream-1" }) });
    expect(await result.text).toBe("Streamed answer about flamingo routes");
    await recorder.flush();
    const turn = await analyst.catalog({ conversation: "ai-stream" });
    expect(turn.turns).toHaveLength(1);
    expect(turn.turns[0]).toMatchObject({ turn_id: "t-stream-1",
                                          first_user_message: "Which flamingo routes?",
                                          last_completion: "Streamed answer about flamingo routes" });
    const shown = await analyst.turn("ai-stream", "t-stream-1");
    expect(JSON.stringify(shown)).toContain("And the costs?");
  });

  test("a failed recording reaches onError, or else the next flush", async () => {
    const errors: unknown[] = [];
    const caught = new GenerationRecorder(user, identity("ai-err"), {
      onError: (error) => errors.push(error) });
    const prompt = "hello";
    const model = new MockLanguageModelV3({ doGenerate: [answer("hi"), answer("hi")] });
    await generateText({ model, prompt, onFinish: caught.onFinish({ prompt }) });
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(ForbiddenError);
    await caught.flush();  // taken by onError: nothing left to throw

    // The SDK ignores what onFinish throws: the failure waits for flush (and is logged).
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    const thrown = new GenerationRecorder(user, identity("ai-err"));
    await generateText({ model, prompt, onFinish: thrown.onFinish({ prompt }) });
    expect(logged.mock.calls[0]?.[0]).toMatch(/ai-err was not recorded: .*may not record/);
    logged.mockRestore();
    await expect(thrown.flush()).rejects.toBeInstanceOf(ForbiddenError);
    await thrown.flush();  // thrown once
  });
});
