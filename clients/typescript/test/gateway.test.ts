/**
 * The wrapper against the real gateway and mock provider: the outcomes a model reads, a
 * worker killed inside the body, a settle after the lease expired, a 401, and a gateway
 * that is down.
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import path from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";

import { Client, GatewayUnreachable, IntentGateError, LeaseLost, type Outcome } from "intentgate";
import {
  AMOUNT,
  LEASE_MS,
  PACKAGE,
  PROCESS_WAIT_MS,
  type Refund,
  type RefundArgs,
  type Runs,
  pause,
  providerKey,
  refundTool,
  startBoth,
} from "./processes.js";

/**
 * Longest wait for a dead caller's lease to run out: a lease lasts the tool's timeout plus
 * the gateway's margin (5 s) from its last renewal.
 */
const LEASE_WAIT_MS = LEASE_MS + 5_000 + 10_000;

const AGENT_KEY = "igk_test_agent_0123456789abcdef0123456789abcdef";

describe("against the gateway", () => {
  let parts: Awaited<ReturnType<typeof startBoth>>;
  let client: Client;

  before(async () => {
    parts = await startBoth("gateway");
    client = new Client({ baseUrl: parts.gateway.url, timeoutMs: 30_000 });
  });
  after(() => parts.stop());

  test("a refund is done once, and its repeat is already_done with the first result", async () => {
    const runs: Runs = { body: 0, lookup: 0 };
    const refundOrder = refundTool(client, parts.mock.url, runs);
    const first = await refundOrder({ order_id: "once-1", amount: AMOUNT });
    const again = await refundOrder({ order_id: "once-1", amount: "5.00" });
    assert.equal(first.status, "done", JSON.stringify(first));
    assert.equal(again.status, "already_done", JSON.stringify(again));
    assert.equal((first.result as Refund).id, (again.result as Refund).id);
    assert.equal(first.external_id, (first.result as Refund).id);
    assert.equal(runs.body, 1);
    assert.deepEqual((await parts.mock.effects()).by_intent_key[providerKey("once-1")], 1);
    // The wrapped function keeps the body's name.
    assert.equal(refundOrder.name, "refundOrder");
    const [listed] = await client.tools();
    assert.equal(listed?.name, "refund_order");
    assert.equal(listed?.executor, "client");
  });

  test("a declined refund is rejected, and a rate limit is not_executed then runs on the next call", async () => {
    await parts.mock.faults({ reject: 1000 });
    const refundOrder = refundTool(client, parts.mock.url);
    const declined = await refundOrder({ order_id: "declined-1", amount: AMOUNT });
    assert.equal(declined.status, "rejected", JSON.stringify(declined));

    await parts.mock.faults({ rate_limited: 1000 });
    const limited = await refundOrder({ order_id: "limited-1", amount: AMOUNT });
    assert.equal(limited.status, "not_executed", JSON.stringify(limited));
    await parts.mock.faults();
    const later = await refundOrder({ order_id: "limited-1", amount: AMOUNT });
    assert.equal(later.status, "done", JSON.stringify(later));
    const effects = await parts.mock.effects();
    assert.equal(effects.by_intent_key[providerKey("declined-1")], undefined);
    assert.equal(effects.by_intent_key[providerKey("limited-1")], 1);
  });

  test("a provider error of unknown outcome is looked up, and the lookup settles it", async () => {
    // A 500 that committed: the body can't tell, so it is unknown; the wrapper asks for a
    // grant at once and the lookup finds the refund.
    await parts.mock.faults({ server_error: 1000, commit_when_ambiguous: 1000 });
    const runs: Runs = { body: 0, lookup: 0 };
    const refundOrder = refundTool(client, parts.mock.url, runs);
    let outcome: Outcome;
    try {
      outcome = await refundOrder({ order_id: "unknown-1", amount: AMOUNT });
    } finally {
      await parts.mock.faults();
    }
    assert.ok(["done", "already_done"].includes(outcome.status), JSON.stringify(outcome));
    const [refund] = await parts.mock.refunds(providerKey("unknown-1"));
    assert.equal((outcome.result as Refund).id, refund?.id);
    assert.deepEqual(runs, { body: 1, lookup: 1 });
  });

  test("a float in the arguments is refused before anything is sent", async () => {
    const runs: Runs = { body: 0, lookup: 0 };
    const refundOrder = refundTool(client, parts.mock.url, runs);
    await assert.rejects(refundOrder({ order_id: "float-1", amount: 5.1 } as unknown as RefundArgs), /arguments\.amount is a float/);
    assert.equal(runs.body, 0);
  });

  test("a worker killed inside the body is resolved by the next caller's lookup, not run again", async () => {
    const worker = spawn(process.execPath, [
      path.join(PACKAGE, "build", "test", "killWorker.js"),
      parts.gateway.url,
      parts.mock.url,
      "kill-1",
      "12.50",
    ], { stdio: ["ignore", "pipe", "inherit"] });
    let sent: { sent: number; key: string };
    try {
      const line = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("the worker sent nothing")), PROCESS_WAIT_MS);
        createInterface({ input: worker.stdout }).once("line", (text) => {
          clearTimeout(timer);
          resolve(text);
        });
        worker.once("exit", (code) => reject(new Error(`the worker ended (${code}) before sending`)));
      });
      sent = JSON.parse(line) as { sent: number; key: string };
      assert.equal(sent.sent, 200);
    } finally {
      // Killed after its refund reached the provider, before it could settle.
      const exited = new Promise((resolve) => worker.once("exit", resolve));
      worker.kill("SIGKILL");
      await exited;
    }
    assert.deepEqual((await parts.mock.effects()).by_intent_key[sent.key], 1);
    const [refund] = await parts.mock.refunds(sent.key);

    // The refund tool with a body that only counts its runs: the lookup must settle the
    // intent, so there are none.
    const runs: Runs = { body: 0, lookup: 0 };
    const counted = client.sideEffect<RefundArgs, Refund>(
      "refund_order",
      { lookup: async (_args, effect) => (await parts.mock.refunds(effect.idempotencyKey))[0] ?? null, externalId: "id" },
      async () => {
        runs.body += 1;
        return { id: "re_never" } as Refund;
      },
    );
    // The dead worker's lease runs out (the tool's timeout plus the gateway's margin after
    // its last renewal); until then each call waits a while and is told pending_unknown.
    const deadline = Date.now() + LEASE_WAIT_MS;
    let outcome = await counted({ order_id: "kill-1", amount: "12.50" });
    while (outcome.status === "pending_unknown" && Date.now() < deadline) {
      await pause(500);
      outcome = await counted({ order_id: "kill-1", amount: "12.50" });
    }
    assert.ok(["done", "already_done"].includes(outcome.status), JSON.stringify(outcome));
    assert.equal((outcome.result as Refund).id, refund?.id);
    assert.equal(runs.body, 0);
    assert.equal((await parts.mock.effects()).by_intent_key[sent.key], 1);
  });

  // Without renewals the body would wait for ever: the timeout fails the test instead.
  test("a call longer than its lease keeps it by renewing, and settles done", { timeout: 60_000 }, async () => {
    // The gateway's answers as the wrapper receives them: the first lease's expiry, and
    // each renewal. The body holds until a renewal arrives after that expiry, so it runs
    // past the lease it was granted with.
    let firstExpiryMs: number | undefined;
    let renewalsAfterExpiry: () => void = () => {};
    const pastExpiry = new Promise<void>((resolve) => {
      renewalsAfterExpiry = resolve;
    });
    const watching: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      const url = String(input);
      if (url.endsWith("/intents") && firstExpiryMs === undefined) {
        const grant = (await response.clone().json()) as { lease?: { expires_at_ms: number } };
        firstExpiryMs = grant.lease?.expires_at_ms;
      }
      if (url.endsWith("/renew") && response.ok && firstExpiryMs !== undefined && Date.now() > firstExpiryMs) {
        renewalsAfterExpiry();
      }
      return response;
    };
    const slowClient = new Client({ baseUrl: parts.gateway.url, timeoutMs: 30_000, fetch: watching });
    const slow = slowClient.sideEffect<RefundArgs, Refund>("refund_order", { externalId: "id" }, async ({ order_id, amount }, { idempotencyKey }) => {
      await pastExpiry;
      const response = await fetch(`${parts.mock.url}/v1/refunds`, {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": idempotencyKey },
        body: JSON.stringify({ order_id, amount, metadata: { intent_key: idempotencyKey } }),
      });
      return (await response.json()) as Refund;
    });
    const outcome = await slow({ order_id: "slow-1", amount: AMOUNT });
    assert.equal(outcome.status, "done", JSON.stringify(outcome));
    assert.ok(firstExpiryMs !== undefined && Date.now() > firstExpiryMs);
    const again = await refundTool(client, parts.mock.url)({ order_id: "slow-1", amount: AMOUNT });
    assert.equal(again.status, "already_done", JSON.stringify(again));
    assert.equal((await parts.mock.effects()).by_intent_key[providerKey("slow-1")], 1);
  });

  test("a settle after the lease expired is refused and changes nothing", async () => {
    const grant = await client.grant("refund_order", { order_id: "late-1", amount: "3.00" });
    assert.equal(grant.action, "execute", JSON.stringify(grant));
    if (grant.action !== "execute") return;
    assert.ok(grant.lease.duration_ms >= LEASE_MS);
    const before = await client.intent(grant.intent_id);
    // Past the lease (the tool's timeout and the gateway's margin): polled, since only
    // the gateway's clock says when it ran out.
    await pause(grant.lease.expires_at_ms - Date.now() + 1_000);

    const refused = await client
      .settle(grant.intent_id, grant.lease.token, "done", { result: { id: "re_999999" }, externalId: "re_999999" })
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    assert.ok(refused instanceof LeaseLost, String(refused));
    assert.equal(refused.status, 409);
    assert.equal(refused.kind, "lease-lost");
    await assert.rejects(client.renew(grant.intent_id, grant.lease.token), LeaseLost);
    const now = await client.intent(grant.intent_id);
    assert.equal(now.result, before.result);
    assert.notEqual(now.status, "done");
    // The next caller is told to look it up, since the first attempt's outcome is unknown.
    // The expired intent is unknown; its next grant is the lookup, unless a lookup was granted
    // within the last 5 s (the sweeper's), when it is answered pending_unknown meanwhile.
    let again = await client.grant("refund_order", { order_id: "late-1", amount: "3.00" });
    for (let asked = 1; again.action === "answer" && asked < 20; asked++) {
      assert.equal(again.outcome.status, "pending_unknown", JSON.stringify(again));
      await new Promise((resolve) => setTimeout(resolve, 500));
      again = await client.grant("refund_order", { order_id: "late-1", amount: "3.00" });
    }
    assert.equal(again.action, "look_up", JSON.stringify(again));
    if (again.action !== "look_up") return;
    assert.equal(again.intent_id, grant.intent_id);
    assert.equal(again.idempotency_key, grant.idempotency_key);
    assert.notEqual(again.lease.token, grant.lease.token);
  });
});

describe("refused or unreachable", () => {
  test("a 401 from the gateway is thrown with the problem's fields, and the body does not run", async () => {
    const parts = await startBoth("auth", { apiKeys: [{ name: "support-agent", key: AGENT_KEY, tenant: "acme", scopes: "call" }] });
    try {
      const runs: Runs = { body: 0, lookup: 0 };
      const anonymous = refundTool(new Client({ baseUrl: parts.gateway.url }), parts.mock.url, runs);
      const refused = await anonymous({ order_id: "keyed-1", amount: AMOUNT }).then(
        () => undefined,
        (error: unknown) => error,
      );
      assert.ok(refused instanceof IntentGateError, String(refused));
      assert.equal(refused.status, 401);
      assert.ok(refused.type.startsWith("urn:intentgate:problem:"), refused.type);
      assert.ok(refused.detail.length > 0);
      assert.equal(refused.problem.status, 401);
      const wrong = refundTool(new Client({ baseUrl: parts.gateway.url, apiKey: `${AGENT_KEY}x` }), parts.mock.url, runs);
      await assert.rejects(wrong({ order_id: "keyed-1", amount: AMOUNT }), (error: unknown) => error instanceof IntentGateError && error.status === 401);
      assert.equal(runs.body, 0);

      const agent = refundTool(new Client({ baseUrl: parts.gateway.url, apiKey: AGENT_KEY }), parts.mock.url, runs);
      const outcome = await agent({ order_id: "keyed-1", amount: AMOUNT });
      assert.equal(outcome.status, "done", JSON.stringify(outcome));
      assert.equal(runs.body, 1);
    } finally {
      await parts.stop();
    }
  });

  test("a gateway that is down: not_executed, and the body does not run", async () => {
    // A port that was free a moment ago, and is closed again: connections are refused.
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    await new Promise<void>((resolve) => server.close(() => resolve()));

    const runs: Runs = { body: 0, lookup: 0 };
    const client = new Client({ baseUrl: `http://127.0.0.1:${port}` });
    const refundOrder = refundTool(client, "http://127.0.0.1:9", runs);
    const outcome = await refundOrder({ order_id: "down-1", amount: AMOUNT });
    assert.equal(outcome.status, "not_executed", JSON.stringify(outcome));
    assert.equal(outcome.reason, "gateway_unreachable");
    assert.match(outcome.message, /Nothing was done/);
    assert.equal(runs.body, 0);
    await assert.rejects(client.grant("refund_order", { order_id: "down-1", amount: AMOUNT }), GatewayUnreachable);
  });
});
