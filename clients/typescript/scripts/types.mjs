// The TypeScript types of the service's OpenAPI document: one function, used by the
// generator (scripts/generate-types.mjs) and by the test that checks the committed file
// against what a running `turnlake serve` publishes.
import openapiTS, { astToString } from "openapi-typescript";

export const GENERATED = new URL("../src/generated/openapi.ts", import.meta.url);
export const DOCUMENT = new URL("../openapi.json", import.meta.url);

const HEADER = `// Generated from the OpenAPI document of \`turnlake serve\` by openapi-typescript.
// Do not edit: regenerate with \`make ts-types\` (or \`npm run types\` in clients/typescript).
`;

/** The text of src/generated/openapi.ts for an OpenAPI document (an object). */
export async function typesOf(document) {
  // A copy: openapi-typescript annotates the object it is given.
  const ast = await openapiTS(structuredClone(document), {
    // A schema that is only {"type": "object"} takes any fields (not Record<string, never>).
    emptyObjectsUnknown: true,
    // Request fields with a default stay optional: a caller gives only what it changes.
    defaultNonNullable: false,
    alphabetize: false,
  });
  return HEADER + astToString(ast);
}
