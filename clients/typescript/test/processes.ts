/**
 * The real parts of the tests: `intentgate mock-provider` and `intentgate serve` as child
 * processes on loopback ports, the mock's admin API, and the refund tool the tests wrap
 * (its body calls the mock's `POST /v1/refunds` with fetch; its lookup asks the mock by key).
 *
 * Run with `INTENTGATE_BIN` pointing at the binary, or after `cargo build -p intentgate`
 * from the repository root (the default is `target/debug/intentgate`).
 */

import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, openSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import { fileURLToPath } from "node:url";

import { Client, type EffectContext, type SideEffectFunction } from "intentgate";

/** The package's folder (`clients/typescript`), from `build/test/` or `test/`. */
export const PACKAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
export const REPOSITORY = path.resolve(PACKAGE, "..", "..");
export const BINARY = path.resolve(process.env.INTENTGATE_BIN ?? path.join(REPOSITORY, "target", "debug", "intentgate"));
/** The repository's example config, whose `refund_order_sdk` is client-executed. */
export const EXAMPLE_CONFIG = path.join(REPOSITORY, "examples", "support-agent.yaml");

/**
 * The refund tool's lease, in milliseconds: short, so an expired lease costs the kill and
 * expiry tests a few seconds. The wrapper renews it while the body runs.
 */
export const LEASE_MS = 1500;
/** How long the mock holds a "timeout" answer before cutting the connection. */
export const TIMEOUT_HOLD_MS = 1500;
/**
 * The body's HTTP timeout for the provider: shorter than the hold, so a held request is a
 * client timeout (ambiguous), as with a real provider's p99.
 */
export const PROVIDER_TIMEOUT_MS = 500;
/** Longest wait for a process to print where it listens, or to stop, or for an admin call. */
export const PROCESS_WAIT_MS = 15_000;
/** The amount every test refund is for. */
export const AMOUNT = "5.00";

export const CONFIG = `gateway:
  tenant: default
auth: none
tools:
  - name: refund_order
    description: Refund part or all of an order. Safe to call once per order; repeats return the first result.
    effect: side_effect
    executor: client
    key: "refund:{order_id}:{amount:.2}"
    timeout_ms: ${LEASE_MS}
    key_window_hours: 24
    input_schema:
      type: object
      required: [order_id, amount]
      properties:
        order_id: {type: string, minLength: 1, maxLength: 64}
        amount: {type: string, pattern: "^[0-9]+(\\\\.[0-9]{1,2})?$"}
      additionalProperties: false
`;

/** A fresh folder for one test's logs, config and ledger. */
export function temporaryFolder(name: string): string {
  return mkdtempSync(path.join(tmpdir(), `intentgate-ts-${name}-`));
}

/** A child `intentgate` process that prints `... listening on http://ADDR` first. */
export class Process {
  readonly url: string;

  private constructor(
    readonly child: ChildProcess,
    url: string,
  ) {
    this.url = url;
  }

  static async start(args: string[], log: string, env: Record<string, string> = {}): Promise<Process> {
    if (!existsSync(BINARY)) {
      throw new Error(`${BINARY} is missing: run \`cargo build -p intentgate\` first, or set INTENTGATE_BIN`);
    }
    const child = spawn(BINARY, args, {
      stdio: ["ignore", "pipe", openSync(log, "w")],
      env: { ...process.env, RUST_LOG: "warn", ...env },
    });
    const lines = createInterface({ input: child.stdout as Readable });
    const first = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${args[0]} printed nothing in ${PROCESS_WAIT_MS} ms; see ${log}`)), PROCESS_WAIT_MS);
      lines.once("line", (line) => {
        clearTimeout(timer);
        resolve(line);
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`${args[0]} exited with ${code} before listening; see ${log}`));
      });
    });
    if (!first.includes(" listening on http://")) {
      child.kill("SIGKILL");
      throw new Error(`unexpected first line ${JSON.stringify(first)}; see ${log}`);
    }
    // Keep reading, so the child never blocks on a full pipe.
    lines.on("line", () => {});
    return new Process(child, first.trim().split(" ").at(-1) as string);
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) {
      return;
    }
    const exited = new Promise<void>((resolve) => this.child.once("exit", () => resolve()));
    this.child.kill("SIGTERM");
    const timer = setTimeout(() => this.child.kill("SIGKILL"), PROCESS_WAIT_MS);
    await exited;
    clearTimeout(timer);
  }
}

/** What `GET /admin/effects` answers. */
export interface Effects {
  total: number;
  by_intent_key: Record<string, number>;
  duplicates: unknown[];
}

/** A refund as the mock provider holds it. */
export interface Refund {
  id: string;
  order_id: string;
  amount: string;
  created_ms: number;
  idempotency_key: string | null;
  metadata: Record<string, string>;
}

/** The mock payments provider, with its admin API. */
export class Mock {
  private constructor(readonly process: Process) {}

  get url(): string {
    return this.process.url;
  }

  static async start(folder: string): Promise<Mock> {
    const process = await Process.start(["mock-provider", "--listen", "127.0.0.1:0", "--faults", "quiet"], path.join(folder, "mock.log"));
    const mock = new Mock(process);
    await mock.faults();
    return mock;
  }

  /** Replaces the fault plan: no latency and the tests' timeout hold, then `plan`. */
  async faults(plan: Record<string, number> = {}): Promise<void> {
    const full = { latency_p50_ms: 0, latency_p95_ms: 0, retry_after_ms: 10, timeout_hold_ms: TIMEOUT_HOLD_MS, ...plan };
    const response = await fetch(`${this.url}/admin/faults`, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(full),
      signal: AbortSignal.timeout(PROCESS_WAIT_MS),
    });
    if (!response.ok) {
      throw new Error(`PUT /admin/faults: ${response.status} ${await response.text()}`);
    }
  }

  async effects(): Promise<Effects> {
    return (await this.#get("/admin/effects")) as Effects;
  }

  async stats(): Promise<Record<string, unknown>> {
    return (await this.#get("/admin/stats")) as Record<string, unknown>;
  }

  /** The refunds whose metadata carries `intentKey`. */
  async refunds(intentKey: string): Promise<Refund[]> {
    return ((await this.#get(`/v1/refunds?intent_key=${encodeURIComponent(intentKey)}`)) as { data: Refund[] }).data;
  }

  async #get(route: string): Promise<unknown> {
    const response = await fetch(`${this.url}${route}`, { signal: AbortSignal.timeout(PROCESS_WAIT_MS) });
    if (!response.ok) {
      throw new Error(`GET ${route}: ${response.status} ${await response.text()}`);
    }
    return response.json();
  }

  stop(): Promise<void> {
    return this.process.stop();
  }
}

/** `intentgate serve` with a SQLite ledger in `folder`. */
export class Gateway {
  private constructor(readonly process: Process) {}

  get url(): string {
    return this.process.url;
  }

  /**
   * Starts the gateway with the refund tool of `CONFIG` (with `apiKeys` in place of
   * `auth: none` when given), or the config file `config`.
   */
  static async start(
    folder: string,
    options: { apiKeys?: ApiKey[]; config?: string; env?: Record<string, string> } = {},
  ): Promise<Gateway> {
    let config = options.config;
    if (config === undefined) {
      config = path.join(folder, "gateway.yaml");
      writeFileSync(config, options.apiKeys === undefined ? CONFIG : withApiKeys(CONFIG, options.apiKeys));
    }
    const args = ["serve", "--listen", "127.0.0.1:0", "--config", config, "--ledger", path.join(folder, "ledger.db"), "--durability", "relaxed"];
    return new Gateway(await Process.start(args, path.join(folder, "serve.log"), options.env));
  }

  stop(): Promise<void> {
    return this.process.stop();
  }
}

/** An API key of the gateway's config: name, key, tenant and scopes (`call, intents:read`). */
export interface ApiKey {
  name: string;
  key: string;
  tenant: string;
  scopes: string;
}

/** `config` with `auth: none` replaced by `keys` (the config holds their SHA-256 digests). */
export function withApiKeys(config: string, keys: ApiKey[]): string {
  let section = "auth:\n  api_keys:\n";
  for (const { name, key, tenant, scopes } of keys) {
    const digest = createHash("sha256").update(key).digest("hex");
    section += `    - name: ${name}\n      sha256: ${digest}\n      tenant: ${tenant}\n      scopes: [${scopes}]\n`;
  }
  if (!config.includes("\nauth: none\n")) {
    throw new Error("the config has no `auth: none` to replace");
  }
  return config.replace("\nauth: none\n", `\n${section}`);
}

/** The provider refused the refund (402): nothing happened. */
export class Declined extends Error {
  override name = "Declined";
}

/** The provider refused before processing anything (429, or 503 with Retry-After). */
export class RateLimited extends Error {
  override name = "RateLimited";
}

/** The business arguments of the refund tool. */
export interface RefundArgs extends Record<string, unknown> {
  order_id: string;
  amount: string;
}

/** Counts the runs of the refund tool's body in this process. */
export interface Runs {
  body: number;
  lookup: number;
}

/** The refund tool the tests run: `refundOrder({order_id, amount})` through `client`. */
export function refundTool(client: Client, mockUrl: string, runs: Runs = { body: 0, lookup: 0 }): SideEffectFunction<RefundArgs> {
  async function findRefund(_args: RefundArgs, effect: EffectContext): Promise<Refund | null> {
    runs.lookup += 1;
    const found = await fetch(`${mockUrl}/v1/refunds?idempotency_key=${encodeURIComponent(effect.idempotencyKey)}`, {
      signal: AbortSignal.timeout(PROVIDER_TIMEOUT_MS),
    });
    if (!found.ok) {
      throw new Error(`the provider's list answered ${found.status}`);
    }
    const data = ((await found.json()) as { data: Refund[] }).data;
    return data[0] ?? null;
  }

  return client.sideEffect<RefundArgs, Refund>(
    "refund_order",
    { rejected: Declined, notProcessed: RateLimited, lookup: findRefund, externalId: "id" },
    async function refundOrder({ order_id, amount }, { idempotencyKey }) {
      runs.body += 1;
      const response = await fetch(`${mockUrl}/v1/refunds`, {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": idempotencyKey },
        body: JSON.stringify({ order_id, amount, metadata: { intent_key: idempotencyKey } }),
        signal: AbortSignal.timeout(PROVIDER_TIMEOUT_MS),
      });
      if (response.status === 402) {
        throw new Declined(((await response.json()) as { error: { message: string } }).error.message);
      }
      if (response.status === 429 || (response.status === 503 && response.headers.has("retry-after"))) {
        throw new RateLimited(`${response.status} before processing`);
      }
      // Anything else that is not a success (a 5xx, a 409 while the key is being
      // processed) and every transport error is ambiguous: not listed, so unknown.
      if (!response.ok) {
        throw new Error(`the provider answered ${response.status}`);
      }
      return (await response.json()) as Refund;
    },
  );
}

/** The provider key the gateway grants for an intent of the refund tool. */
export function providerKey(orderId: string, amount = AMOUNT): string {
  return `refund_order:refund:${orderId}:${amount}`;
}

/** Resolves after `ms` milliseconds: for polling a state that changes with time (a lease's expiry), never to order events. */
export function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A mock provider and a gateway in a fresh folder, for one test; `stop` ends both. */
export async function startBoth(name: string, options: Parameters<typeof Gateway.start>[1] = {}): Promise<{ folder: string; mock: Mock; gateway: Gateway; stop: () => Promise<void> }> {
  const folder = temporaryFolder(name);
  const mock = await Mock.start(folder);
  let gateway: Gateway;
  try {
    gateway = await Gateway.start(folder, options);
  } catch (error) {
    await mock.stop();
    throw error;
  }
  return {
    folder,
    mock,
    gateway,
    stop: async () => {
      await gateway.stop();
      await mock.stop();
    },
  };
}
