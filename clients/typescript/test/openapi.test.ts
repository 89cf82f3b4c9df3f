/**
 * The checked-in types of the HTTP API match the document the built gateway serves: a
 * change of the API that the client's types don't follow fails here, with the command
 * that writes them again.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { TYPES, generatedTypes } from "./openapiTypes.js";

test("src/openapi.ts is what openapi-typescript makes of the served /openapi.json", async () => {
  const checkedIn = readFileSync(TYPES, "utf8");
  const generated = await generatedTypes();
  assert.ok(
    checkedIn === generated,
    "src/openapi.ts differs from the types of the gateway's /openapi.json: run `npm run openapi` in clients/typescript " +
      "(with INTENTGATE_BIN or target/debug/intentgate built) and commit the result",
  );
});
