import { defineConfig } from "tsup";

// ESM (dist/*.js) and CommonJS (dist/*.cjs), each with its declarations.
export default defineConfig({
  entry: { index: "src/index.ts", ai: "src/ai.ts" },
  format: ["esm", "cjs"],
  // TSUP_NO_DTS=1 (npm test): declarations are checked by tsc there, and take the longest.
  dts: !process.env.TSUP_NO_DTS,
  clean: true,
  sourcemap: true,
  target: "node18",
  // The adapter's frameworks are the host's: never bundled.
  external: ["ai", "zod"],
});
