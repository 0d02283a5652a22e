// The docs' examples run as written: every ```ts block of the client's and the adapter's
// pages, in order, against the served service, importing the package by its name.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, expect, test, vi } from "vitest";
import { clientAs, served } from "./helpers.js";

const DOCS = new URL("../../../docs/", import.meta.url);
const OUT = new URL("./.docs/", import.meta.url);

function examples(page: string): string[] {
  const text = readFileSync(fileURLToPath(new URL(page, DOCS)), "utf8");
  return [...text.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);
}

/** Run a page's examples one by one; what they printed with console.log, line by line. */
async function run(page: string): Promise<string[]> {
  const printed: string[] = [];
  const log = vi.spyOn(console, "log").mockImplementation((...args: unknown[]) => {
    printed.push(args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" "));
  });
  const write = vi.spyOn(process.stdout, "write").mockImplementation((chunk) => {
    printed.push(String(chunk));
    return true;
  });
  try {
    mkdirSync(OUT, { recursive: true });
    const blocks = examples(page);
    expect(blocks.length).toBeGreaterThan(0);
    for (const [i, code] of blocks.entries()) {
      const file = new URL(`${page.replace(/\W+/g, "-")}-${i}.ts`, OUT);
      writeFileSync(file, code);
      await import(/* @vite-ignore */ fileURLToPath(file));
    }
  } finally {
    log.mockRestore();
    write.mockRestore();
  }
  return printed;
}

const saved = { ...process.env };
beforeAll(() => {
  process.env.TURNLAKE_URL = served.url;
  process.env.TURNLAKE_KEY = served.keys.admin;
  process.env.TURNLAKE_USER_KEY = served.keys.user;
});
afterAll(() => {
  process.env = saved;
});

test("docs/clients/typescript.md", async () => {
  const printed = await run("clients/typescript.md");
  expect(printed[0]).toBe("accepted");
  expect(printed.some((line) => line.startsWith("docs-ts-1 t-1 "))).toBe(true);
  expect(printed).toContain("2 0 0");
  expect(printed).toContain("turn_id");
  expect(printed).toContain("422 invalid_request k");
  const turns = await clientAs("analyst").catalog({ conversation: "docs-ts-2" });
  expect(turns.turns.map((t) => t.turn_id)).toEqual(["t-1", "t-2"]);
});

test("docs/adapters/vercel-ai.md", async () => {
  const printed = await run("adapters/vercel-ai.md");
  expect(printed[0]).toBe("Last time we matched ledger lines to bank lines.");
  // The search tool found the user's turns about the ledger.
  const found = JSON.parse(printed[1]!) as { hits: Array<{ text: string }> };
  expect(found.hits.length).toBeGreaterThan(0);
  expect(found.hits.every((hit) => hit.text.includes("ledger"))).toBe(true);
  expect(printed.join("")).toContain("Book them by Friday.");
  const analyst = clientAs("analyst");
  const shown = await analyst.turn("docs-vercel-1", "t-1");
  expect(JSON.stringify(shown.steps)).toContain("tool:search_history");
  expect((await analyst.catalog({ conversation: "docs-vercel-2" })).turns[0])
    .toMatchObject({ first_user_message: "When are the invoices due?",
                     last_completion: "Book them by Friday." });
});
