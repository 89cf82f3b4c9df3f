/**
 * The package README as written, against the repository's example config: its TypeScript
 * code of "A refund tool" is compiled with tsc and run against `intentgate serve --config
 * examples/support-agent.yaml` with `intentgate mock-provider` behind it, answering what its
 * comments say, and its framework tools are built from the wrapped function.
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { EXAMPLE_CONFIG, Gateway, Mock, PACKAGE, temporaryFolder } from "./processes.js";

const README = path.join(PACKAGE, "README.md");
/** The sections whose code runs; the others show signatures, or code that needs an agent around it. */
const RUN_SECTIONS = new Set(["A refund tool"]);
const HASH_KEY = "0123456789abcdef0123456789abcdef-typescript-readme";

/** The README's fenced blocks of `language`, in order, with the `##` section of each. */
function blocks(language: string): { section: string; text: string }[] {
  const found: { section: string; text: string }[] = [];
  let section = "";
  let fence: string[] | undefined;
  for (const line of readFileSync(README, "utf8").split("\n")) {
    if (fence === undefined && line.startsWith("## ")) {
      section = line.slice(3).trim();
    } else if (fence === undefined && line === `\`\`\`${language}`) {
      fence = [];
    } else if (fence !== undefined && line === "```") {
      found.push({ section, text: `${fence.join("\n")}\n` });
      fence = undefined;
    } else if (fence !== undefined) {
      fence.push(line);
    }
  }
  assert.equal(fence, undefined, `an unclosed \`\`\`${language} block in ${README}`);
  return found;
}

test("the README's code runs against the example config and answers what its comments say", async () => {
  const code = blocks("ts").filter(({ section }) => RUN_SECTIONS.has(section));
  assert.ok(code.length >= 2, "the refund tool and the frameworks' tools");
  // Inside the package, so that `import ... from "intentgate"` is the package itself.
  const folder = path.join(PACKAGE, "build", "readme");
  mkdirSync(folder, { recursive: true });
  const source = path.join(folder, "readme.ts");
  writeFileSync(
    source,
    `${code.map(({ text }) => text).join("\n")}\n` +
      "console.log(JSON.stringify({ outcome, again, tools: [typeof refundTool.execute, toolNode.tools[0]?.name, agent.tools.length] }));\n",
  );
  const tsc = path.join(PACKAGE, "node_modules", "typescript", "bin", "tsc");
  const options = ["--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--strict", "--skipLibCheck", "--types", "node"];
  await promisify(execFile)(process.execPath, [tsc, ...options, "--rootDir", folder, "--outDir", folder, source]).catch((error: { stdout?: string }) => {
    assert.fail(`the README's TypeScript does not compile:\n${error.stdout ?? String(error)}`);
  });

  const logs = temporaryFolder("readme");
  const mock = await Mock.start(logs);
  try {
    const gateway = await Gateway.start(logs, { config: EXAMPLE_CONFIG, env: { INTENTGATE_MOCK_URL: mock.url, INTENTGATE_HASH_KEY: HASH_KEY } });
    try {
      // Where the README's code finds the gateway and the provider: its defaults are the
      // addresses the example listens on; here both run on free ports.
      const env: NodeJS.ProcessEnv = { ...process.env, INTENTGATE_URL: gateway.url, INTENTGATE_MOCK_URL: mock.url };
      delete env.INTENTGATE_API_KEY;
      const { stdout } = await promisify(execFile)(process.execPath, [path.join(folder, "readme.js")], { env });
      const { outcome, again, tools } = JSON.parse(stdout.trim().split("\n").at(-1) as string);
      assert.equal(outcome.status, "done", JSON.stringify(outcome));
      assert.match(outcome.message, /^It went through\. Tell the user it is done\./);
      assert.equal(outcome.external_id, outcome.result.id);
      assert.equal(outcome.result.id, "re_000001");
      assert.equal(again.status, "already_done", JSON.stringify(again));
      assert.match(again.message, /^Completed earlier; this is the original result\./);
      assert.equal(again.result.id, outcome.result.id);
      assert.deepEqual(tools, ["function", "refund_order", 1]);
      assert.deepEqual((await mock.effects()).by_intent_key, { "refund_order_sdk:refund:8812:49.00": 1 });
    } finally {
      await gateway.stop();
    }
  } finally {
    await mock.stop();
  }
});
