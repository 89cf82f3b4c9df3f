/**
 * Every branch of the wrapper against a scripted gateway (a real HTTP server on a loopback
 * port that answers what each test queues and records what it was sent): how errors of the
 * body are settled, the lookup, a lost lease, a result too large, a settle that can't
 * reach the gateway, the outcomes passed through as they are, the lease renewed while the
 * body runs, the application's intent id, and W3C trace context.
 */

import assert from "node:assert/strict";
import { AsyncLocalStorage } from "node:async_hooks";
import { type IncomingMessage, type Server, type ServerResponse, createServer } from "node:http";
import { after, before, beforeEach, describe, test } from "node:test";

import { type Context, ROOT_CONTEXT, context, trace, TraceFlags } from "@opentelemetry/api";
import { Client, type Outcome, type SideEffectFunction, withIntentId } from "intentgate";

const LEASE_TOKEN = "igl_0123";
const KEY = "refund_order:refund:o-1:5.00";

/** One request the scripted gateway received. */
interface Received {
  method: string;
  path: string;
  headers: IncomingMessage["headers"];
  body: Record<string, unknown> | undefined;
}

/** An answer queued for a route: a status and a body, or `"drop"` to cut the connection. */
type Scripted = { status?: number; body: unknown } | "drop";

class ScriptedGateway {
  readonly received: Received[] = [];
  readonly grants: Scripted[] = [];
  readonly settles: Scripted[] = [];
  readonly renewals: Scripted[] = [];
  /** Called with each renew request as it arrives. */
  onRenew: (() => void) | undefined;
  server: Server | undefined;
  url = "";

  async start(): Promise<void> {
    this.server = createServer((request, response) => this.#handle(request, response));
    await new Promise<void>((resolve) => this.server?.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as { port: number }).port}`;
  }

  reset(): void {
    this.received.length = 0;
    this.grants.length = 0;
    this.settles.length = 0;
    this.renewals.length = 0;
    this.onRenew = undefined;
  }

  sent(route: "intents" | "settle" | "renew"): Record<string, unknown>[] {
    return this.received.filter((request) => request.path.endsWith(`/${route}`)).map((request) => request.body ?? {});
  }

  #handle(request: IncomingMessage, response: ServerResponse): void {
    let text = "";
    request.setEncoding("utf8");
    request.on("data", (chunk: string) => {
      text += chunk;
    });
    request.on("end", () => {
      const path = request.url ?? "";
      this.received.push({ method: request.method ?? "", path, headers: request.headers, body: text ? JSON.parse(text) : undefined });
      const queue = path.endsWith("/intents") ? this.grants : path.endsWith("/settle") ? this.settles : path.endsWith("/renew") ? this.renewals : [];
      if (path.endsWith("/renew")) {
        this.onRenew?.();
      }
      const answer = queue.shift() ?? { status: 500, body: { type: "about:blank", title: "Nothing scripted", status: 500, detail: `nothing scripted for ${path}` } };
      if (answer === "drop") {
        request.socket.destroy();
        return;
      }
      const status = answer.status ?? 200;
      response.writeHead(status, { "content-type": status >= 400 ? "application/problem+json" : "application/json" });
      response.end(typeof answer.body === "string" ? answer.body : JSON.stringify(answer.body));
    });
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()));
  }
}

function lease(durationMs = 30_000) {
  return { token: LEASE_TOKEN, expires_at_ms: Date.now() + durationMs, duration_ms: durationMs };
}
function execute(durationMs?: number) {
  return { body: { action: "execute", intent_id: 42, tool: "refund_order", intent_key: "refund:o-1:5.00", idempotency_key: KEY, attempt: 1, resend: false, lease: lease(durationMs) } };
}
function lookUp() {
  return { body: { ...execute().body, action: "look_up" } };
}
function answer(status: Outcome["status"], extra: Record<string, unknown> = {}) {
  return { body: { action: "answer", outcome: { status, message: `the ${status} message`, tool: "refund_order", ...extra } } };
}
function problem(status: number, kind: string, detail = `${kind} detail`) {
  return { status, body: { type: `urn:intentgate:problem:${kind}`, title: kind, status, detail } };
}

class Declined extends Error {}
class RateLimited extends Error {}
class TimedOut extends Declined {}

interface Args extends Record<string, unknown> {
  order_id: string;
  amount: string;
}

const gateway = new ScriptedGateway();
let client: Client;

before(async () => {
  await gateway.start();
  client = new Client({ baseUrl: gateway.url, apiKey: "igk_scripted" });
});
beforeEach(() => gateway.reset());
after(() => gateway.stop());

/** A refund tool whose body does what `behaviour` says, counting its runs. */
function tool(
  behaviour: (key: string) => unknown,
  options: Parameters<Client["sideEffect"]>[1] = {},
): { refund: SideEffectFunction<Args>; keys: string[] } {
  const keys: string[] = [];
  const refund = client.sideEffect<Args, unknown>(
    "refund_order",
    { rejected: Declined, notProcessed: RateLimited, ambiguous: TimedOut, externalId: "id", ...options },
    async function refundOrder(_args, effect) {
      keys.push(effect.idempotencyKey);
      return behaviour(effect.idempotencyKey);
    },
  );
  return { refund, keys };
}
const ARGS: Args = { order_id: "o-1", amount: "5.00" };

describe("settling what the body did", () => {
  test("a result is settled done, with its external id, and the key went to the body", async () => {
    gateway.grants.push(execute());
    gateway.settles.push(answer("done", { result: { id: "re_1" } }));
    const { refund, keys } = tool(() => ({ id: "re_1", amount: "5.00" }));
    const outcome = await refund(ARGS);
    assert.equal(outcome.status, "done");
    assert.deepEqual(keys, [KEY]);
    assert.deepEqual(gateway.sent("intents"), [{ arguments: ARGS }]);
    assert.deepEqual(gateway.sent("settle"), [{ lease: LEASE_TOKEN, outcome: "done", result: { id: "re_1", amount: "5.00" }, external_id: "re_1" }]);
    assert.equal(gateway.received[0]?.headers.authorization, "Bearer igk_scripted");
    assert.equal(refund.name, "refundOrder");
  });

  test("an error of `rejected` is rejected, of `notProcessed` not_executed, with its message as the reason", async () => {
    gateway.grants.push(execute(), execute());
    gateway.settles.push(answer("rejected"), answer("not_executed"));
    assert.equal((await tool(() => Promise.reject(new Declined("card declined"))).refund(ARGS)).status, "rejected");
    assert.equal((await tool(() => Promise.reject(new RateLimited("429 rate limited"))).refund(ARGS)).status, "not_executed");
    assert.deepEqual(gateway.sent("settle"), [
      { lease: LEASE_TOKEN, outcome: "rejected", reason: "card declined" },
      { lease: LEASE_TOKEN, outcome: "not_executed", reason: "429 rate limited" },
    ]);
  });

  test("an error of `ambiguous` is unknown even when it is also a `rejected` class, and then it is looked up", async () => {
    gateway.grants.push(execute(), lookUp());
    gateway.settles.push(answer("pending_unknown"), answer("already_done", { result: { id: "re_1" } }));
    const found: string[] = [];
    const { refund } = tool(() => Promise.reject(new TimedOut("timed out")), {
      lookup: async (_args, effect) => {
        found.push(effect.idempotencyKey);
        return { id: "re_1" };
      },
    });
    const outcome = await refund(ARGS);
    assert.equal(outcome.status, "already_done");
    assert.deepEqual(found, [KEY]);
    assert.deepEqual(gateway.sent("settle"), [
      { lease: LEASE_TOKEN, outcome: "unknown", reason: "timed out" },
      { lease: LEASE_TOKEN, outcome: "done", result: { id: "re_1" }, external_id: "re_1" },
    ]);
  });

  test("an error not listed is unknown; a lookup finding nothing is not_found, one that throws unknown", async () => {
    gateway.grants.push(execute(), lookUp(), lookUp());
    gateway.settles.push(answer("pending_unknown"), answer("pending_unknown"), answer("pending_unknown"));
    const { refund } = tool(() => Promise.reject(new Error("socket hang up")), { lookup: async () => null });
    assert.equal((await refund(ARGS)).status, "pending_unknown");
    const failing = tool(() => ({}), {
      lookup: async () => {
        throw new Error("list refused");
      },
    });
    assert.equal((await failing.refund(ARGS)).status, "pending_unknown");
    assert.deepEqual(gateway.sent("settle"), [
      { lease: LEASE_TOKEN, outcome: "unknown", reason: "socket hang up" },
      { lease: LEASE_TOKEN, outcome: "not_found" },
      { lease: LEASE_TOKEN, outcome: "unknown", reason: "lookup failed: list refused" },
    ]);
    assert.deepEqual(failing.keys, []);
  });

  test("resendStop's word goes with an unknown settle; a word it may not answer is thrown after settling without it", async () => {
    // The first call asks for a grant again after its unknown settle; the second throws first.
    gateway.grants.push(execute(), answer("pending_unknown"), execute());
    gateway.settles.push(answer("pending_unknown"), answer("pending_unknown"));
    const stopped = tool(() => Promise.reject(new Error("500 replayed")), { resendStop: () => "replayed_server_error" });
    assert.equal((await stopped.refund(ARGS)).status, "pending_unknown");
    const wrong = tool(() => Promise.reject(new Error("500")), { resendStop: () => "never" as never });
    await assert.rejects(wrong.refund(ARGS), /resendStop answered "never"/);
    assert.deepEqual(gateway.sent("settle"), [
      { lease: LEASE_TOKEN, outcome: "unknown", reason: "500 replayed", resend_stop: "replayed_server_error" },
      { lease: LEASE_TOKEN, outcome: "unknown", reason: "500" },
    ]);
  });

  test("a float in the result: settled done without it, then thrown", async () => {
    gateway.grants.push(execute());
    gateway.settles.push(answer("done"));
    await assert.rejects(tool(() => ({ id: "re_1", amount: 5.1 })).refund(ARGS), /result\.amount is a float/);
    assert.deepEqual(gateway.sent("settle"), [{ lease: LEASE_TOKEN, outcome: "done", external_id: "re_1" }]);
  });
});

describe("when the exchange goes wrong", () => {
  test("a lost lease: the settle is refused, and the wrapper answers what a new grant says", async () => {
    gateway.grants.push(execute(), answer("already_done", { result: { id: "re_0" } }));
    gateway.settles.push(problem(409, "lease-lost"));
    const outcome = await tool(() => ({ id: "re_1" })).refund(ARGS);
    assert.equal(outcome.status, "already_done");
    assert.deepEqual(outcome.result, { id: "re_0" });
  });

  test("a result over the gateway's limit is settled again without it", async () => {
    gateway.grants.push(execute());
    gateway.settles.push(problem(422, "too-large"), answer("done"));
    assert.equal((await tool(() => ({ id: "re_1" })).refund(ARGS)).status, "done");
    assert.deepEqual(gateway.sent("settle"), [
      { lease: LEASE_TOKEN, outcome: "done", result: { id: "re_1" }, external_id: "re_1" },
      { lease: LEASE_TOKEN, outcome: "done", external_id: "re_1" },
    ]);
  });

  test("a settle that can't reach the gateway is sent again, and after three tries the answer is pending_unknown", async () => {
    gateway.grants.push(execute(), execute());
    gateway.settles.push("drop", answer("done"), "drop", "drop", "drop");
    assert.equal((await tool(() => ({ id: "re_1" })).refund(ARGS)).status, "done");
    const lost = await tool(() => ({ id: "re_2" })).refund(ARGS);
    assert.equal(lost.status, "pending_unknown");
    assert.equal(lost.reason, "gateway_unreachable");
    assert.equal(gateway.sent("settle").length, 5);
  });

  test("a 5xx of the first grant is not_executed, and the body does not run", async () => {
    gateway.grants.push(problem(503, "ledger-unavailable"));
    const { refund, keys } = tool(() => ({}));
    const outcome = await refund(ARGS);
    assert.equal(outcome.status, "not_executed");
    assert.equal(outcome.reason, "gateway_unreachable");
    assert.deepEqual(keys, []);
  });

  test("an answer that is not a grant is thrown, not taken for an outcome", async () => {
    gateway.grants.push({ body: { action: "launch" } });
    await assert.rejects(tool(() => ({})).refund(ARGS), /unknown action "launch"/);
  });
});

describe("what the model reads", () => {
  for (const status of ["already_done", "pending_unknown", "conflict", "disabled", "invalid_arguments", "awaiting_approval", "over_budget", "rejected"] as const) {
    test(`${status} is answered as the gateway says it, and nothing runs`, async () => {
      gateway.grants.push(answer(status, { reason: status === "rejected" ? "denied" : undefined }));
      const { refund, keys } = tool(() => ({}));
      const outcome = await refund(ARGS);
      assert.equal(outcome.status, status);
      assert.equal(outcome.message, `the ${status} message`);
      assert.deepEqual(keys, []);
    });
  }
});

describe("the lease, the intent id and the trace", () => {
  test("the lease is renewed while the body runs", async () => {
    gateway.grants.push(execute(150));
    gateway.renewals.push({ body: { lease: lease(150) } });
    gateway.settles.push(answer("done"));
    // The body ends once the gateway received a renewal: the renewal is what it waits for.
    const renewed = new Promise<void>((resolve) => {
      gateway.onRenew = resolve;
    });
    const { refund } = tool(() => renewed.then(() => ({ id: "re_1" })));
    assert.equal((await refund(ARGS)).status, "done");
    assert.deepEqual(gateway.sent("renew")[0], { lease: LEASE_TOKEN });
  });

  test("withIntentId's id goes with every grant of the call, and only inside it", async () => {
    gateway.grants.push(execute(), answer("pending_unknown"), answer("invalid_arguments", { reason: "missing_intent_id" }));
    gateway.settles.push(answer("pending_unknown"));
    const { refund } = tool(() => Promise.reject(new Error("dropped")));
    await withIntentId("req-7", () => refund(ARGS));
    await refund(ARGS);
    const grants = gateway.received.filter((request) => request.path.endsWith("/intents"));
    assert.deepEqual(grants.map((request) => request.headers["intent-id"]), ["req-7", "req-7", undefined]);
    assert.throws(() => withIntentId(" padded", () => undefined), RangeError);
  });

  test("the current span's context goes out as traceparent when OpenTelemetry is present", async () => {
    // The API alone, with a context manager of its own: the application's SDK would register one.
    const storage = new AsyncLocalStorage<Context>();
    context.setGlobalContextManager({
      active: () => storage.getStore() ?? ROOT_CONTEXT,
      with: (ctx, fn, thisArg, ...args) => storage.run(ctx, () => fn.call(thisArg, ...args)),
      bind: (_ctx, target) => target,
      enable() {
        return this;
      },
      disable() {
        return this;
      },
    });
    try {
      gateway.grants.push(answer("already_done"), answer("already_done"));
      const { refund } = tool(() => ({}));
      const span = trace.wrapSpanContext({ traceId: "0af7651916cd43dd8448eb211c80319c", spanId: "b7ad6b7169203331", traceFlags: TraceFlags.SAMPLED });
      await context.with(trace.setSpan(context.active(), span), () => refund(ARGS));
      await refund(ARGS);
      const [inSpan, outside] = gateway.received.map((request) => request.headers.traceparent);
      assert.equal(inSpan, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
      assert.equal(outside, undefined);
    } finally {
      context.disable();
    }
  });
});

describe("the client", () => {
  test("an api key and a token together are refused, and a token function is asked per request", async () => {
    assert.throws(() => new Client({ baseUrl: gateway.url, apiKey: "a", token: "b" }), /apiKey or a token, not both/);
    let asked = 0;
    const tokenClient = new Client({
      baseUrl: gateway.url,
      token: () => {
        asked += 1;
        return `jwt-${asked}`;
      },
    });
    gateway.grants.push(answer("already_done"), answer("already_done"));
    await tokenClient.grant("refund_order", ARGS);
    await tokenClient.grant("refund_order", ARGS);
    assert.deepEqual(gateway.received.map((request) => request.headers.authorization), ["Bearer jwt-1", "Bearer jwt-2"]);
  });

  test("a problem answer is thrown with its fields", async () => {
    gateway.grants.push(problem(404, "unknown-tool", "no tool refund_orders; the tools are refund_order"));
    const refused = await client.grant("refund_orders", ARGS).then(
      () => undefined,
      (error: unknown) => error as { status: number; kind: string; detail: string },
    );
    assert.equal(refused?.status, 404);
    assert.equal(refused?.kind, "unknown-tool");
    assert.match(refused?.detail ?? "", /the tools are refund_order/);
  });
});

describe("types", () => {
  test("the wrapped function keeps the body's argument type, without the key", () => {
    const { refund } = tool(() => ({}));
    const typed: (args: Args) => Promise<Outcome> = refund;
    // Compiled, not run: tsc fails the build if these calls type-check.
    const misuses = [
      // @ts-expect-error an amount is a decimal string, not a number
      () => refund({ order_id: "o-1", amount: 5 }),
      // @ts-expect-error the key comes from the gateway, not the caller
      () => refund(ARGS, { idempotencyKey: "mine" }),
    ];
    assert.equal(typed, refund);
    assert.equal(misuses.length, 2);
  });
});
