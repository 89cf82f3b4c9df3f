/**
 * A wrapped tool whose calls need approval, through the real gateway: while the intent is
 * held the body never runs and the wrapper answers `awaiting_approval`, an outcome the model
 * reads (never an exception a framework would retry); once an approver approves it, the next
 * call runs the body once; a denial is `rejected` with the approver's reason, for good.
 */

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { Client } from "intentgate";

import { CONFIG, Gateway, Mock, PROCESS_WAIT_MS, type Refund, type Runs, refundTool, temporaryFolder, withApiKeys } from "./processes.js";

const AGENT_KEY = "igk_test_agent_0123456789abcdef0123456789abcdef";
const APPROVER_KEY = "igk_test_approver_0123456789abcdef0123456789ab";
const ADMIN_TOKEN = "admin-token-0123456789abcdef0123456789abcdef";
/** Refunds over 100 wait for a person. */
const APPROVAL = "    approval:\n      when: amount > 100\n";

describe("approval", () => {
  let mock: Mock;
  let gateway: Gateway;
  let client: Client;

  before(async () => {
    const folder = temporaryFolder("approval");
    const anchor = "    key_window_hours: 24\n";
    assert.ok(CONFIG.includes(anchor));
    const config = path.join(folder, "gateway.yaml");
    writeFileSync(
      config,
      withApiKeys(CONFIG.replace(anchor, anchor + APPROVAL), [
        { name: "support-agent", key: AGENT_KEY, tenant: "acme", scopes: "call" },
        { name: "approver", key: APPROVER_KEY, tenant: "acme", scopes: "approve" },
      ]),
    );
    mock = await Mock.start(folder);
    gateway = await Gateway.start(folder, { config, env: { INTENTGATE_ADMIN_TOKEN: ADMIN_TOKEN } });
    client = new Client({ baseUrl: gateway.url, apiKey: AGENT_KEY, timeoutMs: 30_000 });
  });
  after(async () => {
    await gateway.stop();
    await mock.stop();
  });

  /** The approver's decision on the held refund of `orderId`, through the admin API. */
  async function decide(orderId: string, route: "approve" | "deny", reason: string): Promise<Record<string, unknown>> {
    const headers = { authorization: `Bearer ${APPROVER_KEY}`, "content-type": "application/json" };
    const open = await fetch(`${gateway.url}/v1/admin/approvals?state=open`, { headers, signal: AbortSignal.timeout(PROCESS_WAIT_MS) });
    const held = ((await open.json()) as { approvals: { intent_id: number; arguments: { order_id: string } }[] }).approvals;
    const [intent] = held.filter((one) => one.arguments.order_id === orderId);
    assert.ok(intent !== undefined, `no held intent for ${orderId}: ${JSON.stringify(held)}`);
    const answer = await fetch(`${gateway.url}/v1/admin/approvals/${intent.intent_id}/${route}`, {
      method: "POST",
      headers,
      body: JSON.stringify({ reason }),
      signal: AbortSignal.timeout(PROCESS_WAIT_MS),
    });
    const text = await answer.text();
    assert.equal(answer.status, 200, text);
    return JSON.parse(text) as Record<string, unknown>;
  }

  test("a held refund runs nothing until approved, then runs once", async () => {
    const runs: Runs = { body: 0, lookup: 0 };
    const refundOrder = refundTool(client, mock.url, runs);
    const small = await refundOrder({ order_id: "small-1", amount: "20.00" });
    assert.equal(small.status, "done", JSON.stringify(small));
    for (let call = 0; call < 3; call += 1) {
      const held = await refundOrder({ order_id: "big-1", amount: "150.00" });
      assert.equal(held.status, "awaiting_approval", JSON.stringify(held));
      assert.match(held.message, /Do not call refund_order again/);
    }
    assert.equal(runs.body, 1);

    const decided = await decide("big-1", "approve", "checked the order");
    // A client-executed tool runs in the caller's code: at its next call.
    assert.equal(decided.runs, "at_next_call", JSON.stringify(decided));
    const ran = await refundOrder({ order_id: "big-1", amount: "150.00" });
    const again = await refundOrder({ order_id: "big-1", amount: "150.00" });
    assert.equal(ran.status, "done", JSON.stringify(ran));
    assert.equal(again.status, "already_done", JSON.stringify(again));
    assert.equal((again.result as Refund).id, (ran.result as Refund).id);
    assert.equal(runs.body, 2);
    assert.deepEqual((await mock.effects()).by_intent_key, {
      "acme/refund_order:refund:small-1:20.00": 1,
      "acme/refund_order:refund:big-1:150.00": 1,
    });
  });

  test("a denied refund is rejected with the reason, and never runs", async () => {
    const runs: Runs = { body: 0, lookup: 0 };
    const refundOrder = refundTool(client, mock.url, runs);
    const first = await refundOrder({ order_id: "big-2", amount: "250.00" });
    assert.equal(first.status, "awaiting_approval", JSON.stringify(first));
    await decide("big-2", "deny", "refunded by hand already");
    for (let call = 0; call < 2; call += 1) {
      const answer = await refundOrder({ order_id: "big-2", amount: "250.00" });
      assert.equal(answer.status, "rejected", JSON.stringify(answer));
      assert.equal(answer.reason, "denied");
      assert.match(answer.message, /refunded by hand already/);
    }
    assert.equal(runs.body, 0);
    assert.equal((await mock.effects()).by_intent_key["acme/refund_order:refund:big-2:250.00"], undefined);
  });
});
