/**
 * The four-layer retry storm, for any agent framework: every intent is asked for 16 times
 * at once, by 2 presses of the user's button, each sent twice by the user's HTTP client
 * (a retry after a lost answer) to the agent's HTTP endpoint, each run of the agent
 * making 2 tool calls for the refund in a step (the model asking twice), and the framework
 * running that step twice (its own retry, or its loop's next step). Meanwhile the provider
 * times out, answers 500s that committed anyway, drops connections and rate-limits.
 *
 * Then the faults stop and every intent is called until the gateway settles it, and three
 * times more. Exactly once is checked on the provider's own effect log, not on what the
 * callers were told; every answer is checked against that log.
 */

import assert from "node:assert/strict";
import { type Server, createServer } from "node:http";

import type { Outcome, SideEffectFunction } from "intentgate";

import { AMOUNT, type Mock, type Refund, type RefundArgs, pause, providerKey } from "./processes.js";

/** The layers of the storm and how many calls each makes of the one below. */
export const LAYERS = { user: 2, http: 2, model: 2, framework: 2 } as const;
/** Calls of the wrapped function per intent: the product of the layers. */
export const CALLS_PER_INTENT = LAYERS.user * LAYERS.http * LAYERS.model * LAYERS.framework;
/** Intents per storm. */
export const INTENTS = 10;
/**
 * How long the intents get to be settled once the faults stop (lookups of one intent are
 * at most one per 5 s, so a few rounds).
 */
export const RECOVERY_MS = 45_000;

/**
 * The faults of the storm, in parts per thousand. Every ambiguous shape commits, so a
 * stored 500 is replayed as a 500 and only the lookup can settle its intent. Besides, the
 * first request of every intent is lost (a timeout that did not commit): every intent goes
 * through the lookup (not found) and a same-key re-send while its other calls wait.
 */
export const FAULTS = {
  first_timeouts_per_key: 1,
  timeout: 150,
  dropped: 100,
  server_error: 150,
  rate_limited: 150,
  commit_when_ambiguous: 1000,
  lookup_failure: 100,
  seed: 7,
};

/** One call of the wrapped function, as the storm saw it. */
interface CallRecord {
  orderId: string;
  startedMs: number;
  outcome: Outcome;
}

/**
 * The wrapped function with every call recorded: the start time and the outcome of each,
 * whichever framework made it.
 */
export function recording(refundOrder: SideEffectFunction<RefundArgs>, records: CallRecord[]): SideEffectFunction<RefundArgs> {
  return async (args) => {
    const startedMs = Date.now();
    const outcome = await refundOrder(args);
    records.push({ orderId: args.order_id, startedMs, outcome });
    return outcome;
  };
}

/** The agent's HTTP endpoint: `POST /refund` with `{"order_id"}` runs the agent once for that order. */
async function agentEndpoint(runAgent: (orderId: string) => Promise<Outcome[]>): Promise<{ url: string; server: Server }> {
  const server = createServer((request, response) => {
    let body = "";
    request.setEncoding("utf8");
    request.on("data", (chunk: string) => {
      body += chunk;
    });
    request.on("end", () => {
      const { order_id: orderId } = JSON.parse(body) as { order_id: string };
      runAgent(orderId).then(
        (outcomes) => {
          response.writeHead(200, { "content-type": "application/json" });
          response.end(JSON.stringify({ outcomes }));
        },
        (error: unknown) => {
          response.writeHead(500, { "content-type": "application/json" });
          response.end(JSON.stringify({ error: String(error) }));
        },
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, server };
}

/** The user's HTTP client: sends the request, and again at once, as a retry after a lost answer would. */
async function press(url: string, orderId: string): Promise<void> {
  const sends = Array.from({ length: LAYERS.http }, async () => {
    const response = await fetch(`${url}/refund`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ order_id: orderId }),
    });
    const text = await response.text();
    assert.equal(response.status, 200, `the agent's run failed: ${text}`);
  });
  await Promise.all(sends);
}

function counted(statuses: Iterable<string>): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const status of statuses) {
    counts[status] = (counts[status] ?? 0) + 1;
  }
  return counts;
}

/**
 * Runs the storm for `framework` and checks it. `runAgent(orderId, refundOrder)` is one
 * run of the framework's agent for one request of the user, calling `refundOrder` as its
 * tool; `refundOrder` is the wrapped function, for the calls after the storm. Answers the
 * line of figures it printed.
 */
export async function stormThrough(
  framework: string,
  mock: Mock,
  refundOrder: SideEffectFunction<RefundArgs>,
  runAgent: (orderId: string, refundOrder: SideEffectFunction<RefundArgs>) => Promise<Outcome[]>,
): Promise<string> {
  const orders = Array.from({ length: INTENTS }, (_, index) => `${framework}-${index + 1}`);
  const records: CallRecord[] = [];
  const recorded = recording(refundOrder, records);
  const endpoint = await agentEndpoint((orderId) => runAgent(orderId, recorded));

  await mock.faults(FAULTS);
  const started = Date.now();
  try {
    await Promise.all(orders.flatMap((orderId) => Array.from({ length: LAYERS.user }, () => press(endpoint.url, orderId))));
  } finally {
    endpoint.server.close();
    await mock.faults();
  }
  const stormMs = Date.now() - started;

  // Faults off; every intent is called until the gateway settles it.
  const recovery = new Map<string, Outcome>();
  const deadline = Date.now() + RECOVERY_MS;
  let waiting = orders;
  while (waiting.length > 0) {
    const outcomes = await Promise.all(waiting.map((orderId) => refundOrder({ order_id: orderId, amount: AMOUNT })));
    waiting.forEach((orderId, index) => recovery.set(orderId, outcomes[index] as Outcome));
    waiting = waiting.filter((orderId) => recovery.get(orderId)?.status === "pending_unknown");
    if (waiting.length > 0 && Date.now() > deadline) {
      break;
    }
    if (waiting.length > 0) {
      // The gateway grants one lookup per intent per 5 s: polled, since only its clock says when.
      await pause(1_000);
    }
  }
  // Then three more callers each: all are told the same result.
  const final = await Promise.all(
    orders.flatMap((orderId) => [1, 2, 3].map(async () => [orderId, await refundOrder({ order_id: orderId, amount: AMOUNT })] as const)),
  );

  const effects = await mock.effects();
  const perIntent = counted(orders.map((orderId) => String(effects.by_intent_key[providerKey(orderId)] ?? 0)));
  const line =
    `storm through ${framework}: ${INTENTS} intents x ${CALLS_PER_INTENT} calls ` +
    `(${LAYERS.user} user x ${LAYERS.http} HTTP client x ${LAYERS.model} model x ${LAYERS.framework} framework) = ${records.length} calls in ${(stormMs / 1000).toFixed(1)} s; ` +
    `statuses ${JSON.stringify(counted(records.map((record) => record.outcome.status)))}; ` +
    `after the faults stopped ${JSON.stringify(counted([...recovery.values()].map((outcome) => outcome.status)))}; ` +
    `final ${JSON.stringify(counted(final.map(([, outcome]) => outcome.status)))}; ` +
    `effects per intent ${JSON.stringify(perIntent)} (intents per count), ${effects.total} in all, duplicate keys ${effects.duplicates.length}; ` +
    `provider ${JSON.stringify(await mock.stats())}`;
  console.log(line);

  // Every layer made its calls.
  for (const orderId of orders) {
    assert.equal(records.filter((record) => record.orderId === orderId).length, CALLS_PER_INTENT, `calls of ${orderId}`);
  }
  // No duplicate effect, and no lost intent: exactly one effect per intent.
  assert.deepEqual(effects.duplicates, []);
  assert.equal(effects.total, INTENTS);
  for (const orderId of orders) {
    assert.equal(effects.by_intent_key[providerKey(orderId)], 1, `effects of ${orderId}`);
  }
  const refunds = new Map<string, Refund>();
  for (const orderId of orders) {
    const [refund] = await mock.refunds(providerKey(orderId));
    assert.ok(refund !== undefined, orderId);
    refunds.set(orderId, refund);
  }
  // Every answer is true to the provider's log.
  for (const { orderId, startedMs, outcome } of records) {
    const refund = refunds.get(orderId) as Refund;
    assert.ok(["done", "already_done", "pending_unknown", "not_executed"].includes(outcome.status), JSON.stringify(outcome));
    if (outcome.status === "done" || outcome.status === "already_done") {
      assert.equal((outcome.result as Refund).id, refund.id, JSON.stringify(outcome));
    }
    if (outcome.status === "not_executed") {
      assert.ok(startedMs <= refund.created_ms, `told not_executed after the refund existed: ${JSON.stringify(outcome)}`);
    }
  }
  for (const [orderId, outcome] of recovery) {
    assert.ok(["done", "already_done"].includes(outcome.status), `${orderId}: ${JSON.stringify(outcome)}`);
    assert.equal((outcome.result as Refund).id, refunds.get(orderId)?.id);
  }
  for (const [orderId, outcome] of final) {
    assert.equal(outcome.status, "already_done", `${orderId}: ${JSON.stringify(outcome)}`);
    assert.equal((outcome.result as Refund).id, refunds.get(orderId)?.id);
  }
  return line;
}
