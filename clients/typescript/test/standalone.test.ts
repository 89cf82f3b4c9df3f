/**
 * The package as an application installs it: `dist/` and `package.json` alone in a
 * `node_modules/intentgate` with nothing beside it, so no dependency can be found. It must
 * import, and its wrapper must work, with Node's own `fetch`; without `@opentelemetry/api`
 * it sends no trace headers.
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, mkdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import path from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { PACKAGE, temporaryFolder } from "./processes.js";

/** What the installed package runs: a wrapped function against the gateway at argv[2]. */
const SCRIPT = `
import { Client } from "intentgate";
const client = new Client({ baseUrl: process.argv[2] });
const refund = client.sideEffect("refund_order", {}, async () => ({ id: "re_never" }));
console.log(JSON.stringify(await refund({ order_id: "o-1", amount: "5.00" })));
`;

test("the package runs with no dependency installed, and sends no trace headers without OpenTelemetry", async () => {
  const project = temporaryFolder("standalone");
  const installed = path.join(project, "node_modules", "intentgate");
  mkdirSync(installed, { recursive: true });
  cpSync(path.join(PACKAGE, "dist"), path.join(installed, "dist"), { recursive: true });
  cpSync(path.join(PACKAGE, "package.json"), path.join(installed, "package.json"));
  writeFileSync(path.join(project, "app.mjs"), SCRIPT);

  const headers: Record<string, string | string[] | undefined>[] = [];
  const gateway = createServer((request, response) => {
    headers.push(request.headers);
    request.resume();
    request.on("end", () => {
      response.writeHead(200, { "content-type": "application/json" });
      response.end(JSON.stringify({ action: "answer", outcome: { status: "already_done", message: "Completed earlier.", tool: "refund_order", result: { id: "re_1", amount: 5.1 } } }));
    });
  });
  await new Promise<void>((resolve) => gateway.listen(0, "127.0.0.1", resolve));
  try {
    const url = `http://127.0.0.1:${(gateway.address() as { port: number }).port}`;
    const { stdout } = await promisify(execFile)(process.execPath, [path.join(project, "app.mjs"), url], { cwd: project });
    const outcome = JSON.parse(stdout) as { status: string; result: { amount: unknown } };
    assert.equal(outcome.status, "already_done");
    // A number with a fraction in an answer is read as its text.
    assert.equal(outcome.result.amount, "5.1");
    assert.equal(headers.length, 1);
    assert.equal(headers[0]?.traceparent, undefined);
  } finally {
    gateway.closeAllConnections();
    await new Promise<void>((resolve) => gateway.close(() => resolve()));
  }
});
