/**
 * The types of the HTTP API, `src/openapi.ts`, made from the OpenAPI document the built
 * gateway serves at `/openapi.json`, with openapi-typescript (pinned in package-lock.json).
 * `openapi.test.ts` checks that the checked-in file is what this makes;
 * `npm run openapi` writes it again after the API changed.
 *
 * Usage: node build/test/openapiTypes.js --write
 */

import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";

import { Gateway, PACKAGE, PROCESS_WAIT_MS, temporaryFolder } from "./processes.js";

/** The checked-in types. */
export const TYPES = path.join(PACKAGE, "src", "openapi.ts");

/** The document the gateway serves, as text. */
export async function servedDocument(): Promise<string> {
  const folder = temporaryFolder("openapi");
  const gateway = await Gateway.start(folder);
  try {
    const response = await fetch(`${gateway.url}/openapi.json`, { signal: AbortSignal.timeout(PROCESS_WAIT_MS) });
    if (!response.ok) {
      throw new Error(`GET /openapi.json answered ${response.status}`);
    }
    return await response.text();
  } finally {
    await gateway.stop();
  }
}

/** `src/openapi.ts` as openapi-typescript makes it from the served document. */
export async function generatedTypes(): Promise<string> {
  const folder = temporaryFolder("openapi-types");
  const document = path.join(folder, "openapi.json");
  const types = path.join(folder, "openapi.ts");
  writeFileSync(document, await servedDocument());
  const cli = path.join(PACKAGE, "node_modules", "openapi-typescript", "bin", "cli.js");
  await promisify(execFile)(process.execPath, [cli, document, "--output", types]);
  return readFileSync(types, "utf8");
}

if (process.argv[1] === fileURLToPath(import.meta.url) && process.argv[2] === "--write") {
  writeFileSync(TYPES, await generatedTypes());
  console.log(`wrote ${TYPES}`);
}
