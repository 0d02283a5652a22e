// The committed generated types are what the running service publishes now, and the built
// package loads both ways (ESM import, CommonJS require).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { expect, test } from "vitest";
// @ts-expect-error: a plain ES module of the build scripts, without declarations
import { GENERATED, typesOf } from "../scripts/types.mjs";
import { served } from "./helpers.js";

test("src/generated/openapi.ts matches the served OpenAPI document", async () => {
  const document = await (await fetch(`${served.url}/openapi.json`)).json();
  const committed = readFileSync(fileURLToPath(GENERATED as URL), "utf8");
  // On failure: run `make ts-types` and commit the regenerated files.
  expect(await typesOf(document)).toBe(committed);
});

test("the build loads as ESM and as CommonJS, by the package's exports", async () => {
  // By the package's own name (Node resolves it through package.json "exports"); held in a
  // variable so that tsc does not look for the declarations, which `npm test` does not build.
  const name = "turnlake";
  const require = createRequire(import.meta.url);
  const esm = await import(/* @vite-ignore */ name);
  const cjs = require(name);
  expect(require.resolve(name)).toMatch(/dist\/index\.cjs$/);
  for (const loaded of [esm, cjs]) {
    expect(typeof loaded.TurnlakeClient).toBe("function");
    expect(new loaded.UnauthorizedError(401, "unauthenticated", "m", undefined, "GET /"))
      .toBeInstanceOf(loaded.TurnlakeError);
  }
  expect(typeof require(`${name}/ai`).historyTools).toBe("function");
  expect(typeof (await import(/* @vite-ignore */ `${name}/ai`)).GenerationRecorder)
    .toBe("function");
});
