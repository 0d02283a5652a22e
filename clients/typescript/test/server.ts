// A real `turnlake serve` on 127.0.0.1 over a temporary lake, started before the tests and
// stopped after them (vitest globalSetup), with one key per role of tenant acme.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { TestProject } from "vitest/node";

export interface Served {
  url: string;
  keys: Record<"user" | "otherUser" | "analyst" | "recorder" | "admin" | "zetaAdmin", string>;
  /** The server's workspace (POST /v1/pull writes below it). */
  workspace: string;
}

declare module "vitest" {
  export interface ProvidedContext {
    served: Served;
  }
}

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const START_TIMEOUT_MS = 120_000;

/** The Python of the repository: $TURNLAKE_PYTHON, else .venv/bin/python. */
export function python(): string {
  const venv = join(ROOT, ".venv", "bin", "python");
  return process.env.TURNLAKE_PYTHON || (existsSync(venv) ? venv : "python3");
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      probe.close(() => resolve(typeof address === "object" && address ? address.port : 0));
    });
  });
}

// The keys are made in one process (what `turnlake keys create` does per key).
const MAKE_KEYS = `
import json, sys
from lake.keys import KeyStore
store = KeyStore(sys.argv[1])
made = {
    "user": store.create(tenant="acme", role="user", user_id="u-ana")[1],
    "otherUser": store.create(tenant="acme", role="user", user_id="u-ben")[1],
    "analyst": store.create(tenant="acme", role="analyst")[1],
    "recorder": store.create(tenant="acme", role="recorder")[1],
    "admin": store.create(tenant="acme", role="admin")[1],
    "zetaAdmin": store.create(tenant="zeta", role="admin")[1],
}
print(json.dumps(made))
`;

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const folder = mkdtempSync(join(tmpdir(), "turnlake-ts-"));
  const lake = join(folder, "lake");
  const workspace = join(folder, "workspace");
  const env: NodeJS.ProcessEnv = { ...process.env, TURNLAKE_EMBEDDING_MODEL: "hashing-64",
                                   HF_HUB_OFFLINE: "1" };
  delete env.TURNLAKE_LAKE;
  const keys = JSON.parse(execFileSync(python(), ["-c", MAKE_KEYS, lake],
                                       { cwd: ROOT, env, encoding: "utf8" })) as Served["keys"];
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const logPath = join(folder, "serve.log");
  const log = openSync(logPath, "w");
  const server: ChildProcess = spawn(python(), [
    "-m", "pipeline.cli", "serve", "--lake", lake, "--port", String(port),
    "--workspace", workspace,
  ], { cwd: ROOT, env, stdio: ["ignore", "ignore", log] });
  const exited = new Promise<void>((resolve) => server.once("exit", () => resolve()));

  const stop = async () => {
    if (server.exitCode === null && server.signalCode === null) {
      server.kill("SIGINT");
      const killer = setTimeout(() => server.kill("SIGKILL"), 30_000);
      await exited;
      clearTimeout(killer);
    }
  };
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    if (server.exitCode !== null) {
      throw new Error(`turnlake serve exited ${server.exitCode}: ${readFileSync(logPath, "utf8")
        .slice(-3000)}`);
    }
    try {
      if ((await fetch(`${url}/healthz`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`turnlake serve did not answer within ${START_TIMEOUT_MS} ms`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  project.provide("served", { url, keys, workspace });
  return async () => {
    await stop();
    rmSync(folder, { recursive: true, force: true });
  };
}
