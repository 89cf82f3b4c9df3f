/**
 * A client-executed tool keyed by the application's intent id, through the wrapper, against
 * the real gateway and mock provider: `charge_card`, keyed `charge:{customer_id}:{intent_id}`
 * since a customer may be charged the same amount twice on purpose. One request of the user,
 * served inside `withIntentId`, is one charge however often it is retried; two requests
 * served at the same time on one event loop are two; a call outside any request runs
 * nothing and tells the model why.
 */

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import { Client, MISSING_INTENT_ID, type Outcome, type SideEffectFunction, withIntentId } from "intentgate";

import { CONFIG, Gateway, LEASE_MS, Mock, PROCESS_WAIT_MS, temporaryFolder } from "./processes.js";

/** The tests' config plus a client-executed charge keyed by the application's intent id. */
const CHARGE_CONFIG = `${CONFIG}  - name: charge_card
    description: Charge the customer's card on file. Tell the customer the amount and get their agreement first.
    effect: side_effect
    executor: client
    key: "charge:{customer_id}:{intent_id}"
    timeout_ms: ${LEASE_MS}
    key_window_hours: 24
    input_schema:
      type: object
      required: [customer_id, amount]
      properties:
        customer_id: {type: string, minLength: 1, maxLength: 64}
        amount: {type: string, pattern: "^[0-9]+(\\\\.[0-9]{1,2})?$"}
      additionalProperties: false
`;

/** Calls of one request in a storm. */
const STORM_CALLS = 16;

/** How many outcomes have each status. */
function statusCounts(outcomes: Outcome[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const { status } of outcomes) {
    counts[status] = (counts[status] ?? 0) + 1;
  }
  return counts;
}

interface ChargeArgs {
  customer_id: string;
  amount: string;
}

describe("the application's intent id", () => {
  let mock: Mock;
  let gateway: Gateway;
  let client: Client;

  before(async () => {
    const folder = temporaryFolder("intent-id");
    const config = path.join(folder, "gateway.yaml");
    writeFileSync(config, CHARGE_CONFIG);
    mock = await Mock.start(folder);
    gateway = await Gateway.start(folder, { config });
    client = new Client({ baseUrl: gateway.url, timeoutMs: 30_000 });
  });
  after(async () => {
    await gateway.stop();
    await mock.stop();
  });

  /** The charge tool; `keys` collects the provider key of each run of its body. */
  function chargeTool(keys: string[]): SideEffectFunction<ChargeArgs> {
    return client.sideEffect<ChargeArgs, { id: string }>("charge_card", { externalId: "id" }, async ({ customer_id, amount }, { idempotencyKey }) => {
      keys.push(idempotencyKey);
      const response = await fetch(`${mock.url}/v1/charges`, {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": idempotencyKey },
        body: JSON.stringify({ customer_id, amount, currency: "usd", metadata: { intent_key: idempotencyKey } }),
        signal: AbortSignal.timeout(PROCESS_WAIT_MS),
      });
      if (!response.ok) {
        throw new Error(`the provider answered ${response.status}`);
      }
      return (await response.json()) as { id: string };
    });
  }

  function storm(charge: SideEffectFunction<ChargeArgs>, calls: number, args: ChargeArgs): Promise<Outcome[]> {
    return Promise.all(Array.from({ length: calls }, () => charge(args)));
  }

  test("two requests served at once, each a storm: one charge each, and the same id with another amount is a conflict", async () => {
    const listed = (await client.tools()).find((tool) => tool.name === "charge_card");
    assert.equal(listed?.needs_intent_id, true);
    const keys: string[] = [];
    const charge = chargeTool(keys);
    const args = { customer_id: "cus_1042", amount: "25.00" };
    // Interleaved on one event loop: each call sees the id of the request it serves.
    const [first, second] = await Promise.all([
      withIntentId("ord-7781-charge", () => storm(charge, STORM_CALLS, args)),
      withIntentId("ord-7790-charge", () => storm(charge, STORM_CALLS, args)),
    ]);
    const conflict = await withIntentId("ord-7781-charge", () => charge({ customer_id: "cus_1042", amount: "30.00" }));
    console.log(
      `a storm of ${STORM_CALLS} calls under each of two intent ids at once: ` +
        `${JSON.stringify([first, second].map((outcomes) => statusCounts(outcomes as Outcome[])))}; body runs ${keys.length}`,
    );

    for (const outcomes of [first as Outcome[], second as Outcome[]]) {
      assert.equal(outcomes.filter((outcome) => outcome.status === "done").length, 1, JSON.stringify(outcomes));
      assert.equal(outcomes.filter((outcome) => outcome.status === "already_done").length, STORM_CALLS - 1);
      assert.equal(new Set(outcomes.map((outcome) => (outcome.result as { id: string }).id)).size, 1);
    }
    assert.notEqual((first?.[0]?.result as { id: string }).id, (second?.[0]?.result as { id: string }).id);
    assert.deepEqual(keys.sort(), ["charge_card:charge:cus_1042:ord-7781-charge", "charge_card:charge:cus_1042:ord-7790-charge"]);
    assert.equal(conflict.status, "conflict", JSON.stringify(conflict));
    const effects = await mock.effects();
    assert.equal(effects.by_intent_key["charge_card:charge:cus_1042:ord-7781-charge"], 1);
    assert.equal(effects.by_intent_key["charge_card:charge:cus_1042:ord-7790-charge"], 1);
  });

  test("without an intent id nothing runs and the model is told; an id is gone once its request is served", async () => {
    const keys: string[] = [];
    const charge = chargeTool(keys);
    const args = { customer_id: "cus_2001", amount: "25.00" };
    const outcomes = await storm(charge, 4, args);
    const served = await withIntentId("ord-8800-charge", () => charge(args));
    const afterwards = await charge(args);

    const [first] = outcomes;
    assert.equal(first?.status, "invalid_arguments", JSON.stringify(first));
    assert.equal(first?.reason, MISSING_INTENT_ID);
    assert.match(first?.message ?? "", /Do not retry charge_card/);
    for (const outcome of [...outcomes, afterwards]) {
      assert.deepEqual(outcome, first);
    }
    assert.equal(served.status, "done", JSON.stringify(served));
    assert.deepEqual(keys, ["charge_card:charge:cus_2001:ord-8800-charge"]);
  });
});
