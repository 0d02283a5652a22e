// Regenerate openapi.json and src/generated/openapi.ts from the app factory of this
// repository (scripts/dump_openapi.py). The Python is $TURNLAKE_PYTHON, else the
// repository's .venv, else python3.
//
//   node scripts/generate-types.mjs          write both files
//   node scripts/generate-types.mjs --check  exit 1 when either file is out of date
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { DOCUMENT, GENERATED, typesOf } from "./types.mjs";

const root = fileURLToPath(new URL("../../../", import.meta.url));
const venvPython = `${root}.venv/bin/python`;
const python = process.env.TURNLAKE_PYTHON || (existsSync(venvPython) ? venvPython : "python3");
const check = process.argv.includes("--check");

const json = execFileSync(python, [fileURLToPath(new URL("dump_openapi.py", import.meta.url))],
  { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
const types = await typesOf(JSON.parse(json));

let stale = false;
for (const [file, text] of [[DOCUMENT, json], [GENERATED, types]]) {
  const path = fileURLToPath(file);
  const current = existsSync(path) ? readFileSync(path, "utf8") : null;
  if (current === text) continue;
  if (check) {
    console.error(`${path} is out of date: run \`make ts-types\``);
    stale = true;
  } else {
    writeFileSync(path, text);
    console.log(`wrote ${path}`);
  }
}
process.exit(stale ? 1 : 0);
