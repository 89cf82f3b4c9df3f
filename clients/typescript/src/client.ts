/**
 * `Client`: one method per route of the gateway's HTTP API that an agent uses, and
 * `sideEffect`, which runs a function of yours under the intent API (grant, run, renew,
 * settle, look up). The exchange of a wrapped function is in `sideEffect.ts`.
 *
 * Every answer is parsed without floats (`json.ts`), every 4xx or 5xx throws
 * `IntentGateError` (`LeaseLost` for 409 `lease-lost`), and a gateway that can't be
 * reached throws `GatewayUnreachable`.
 *
 * @module
 */

import { GatewayUnreachable, errorFromResponse } from "./errors.js";
import { currentIntentId } from "./intentId.js";
import { type JsonValue, parse, stringify } from "./json.js";
import type { components } from "./openapi.js";
import type { GatewayOutcome } from "./outcomes.js";
import { SideEffect, type SideEffectFunction, type SideEffectOptions, type EffectContext } from "./sideEffect.js";
import { traceHeaders } from "./traceContext.js";

/**
 * The default HTTP timeout, in milliseconds. A grant waits while another caller holds the
 * intent's lease, up to the tool's `timeout_ms` plus a second: keep the timeout above that.
 */
export const DEFAULT_TIMEOUT_MS = 60_000;

/** A grant or a settle's answer: `answer` with an outcome, or an `execute` or `look_up` lease. */
export type GrantResponse = components["schemas"]["GrantResponse"];
/** An `execute` or `look_up` grant. */
export type LeaseGrant = Extract<GrantResponse, { action: "execute" | "look_up" }>;
/** A lease as the caller holds it: `token`, `expires_at_ms`, `duration_ms`. */
export type Lease = components["schemas"]["Lease"];
/** What the caller's code learned: `done`, `rejected`, `not_executed`, `unknown`, `not_found`. */
export type SettleOutcome = components["schemas"]["SettleOutcome"];
/** Why same-key re-sends of an intent stop for good (see the package's README). */
export type ResendStop = NonNullable<components["schemas"]["SettleRequest"]["resend_stop"]>;
/** A tool as `GET /v1/tools` lists it. */
export type ToolView = components["schemas"]["ToolView"];
/** An intent as the ledger holds it (`GET /v1/intents/{id}`). */
export type IntentView = components["schemas"]["IntentView"];

/** How the client proves who is calling. */
export interface ClientOptions {
  /** The gateway, e.g. `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** An API key of the gateway's `auth.api_keys`, sent as `Authorization: Bearer <key>`. */
  apiKey?: string | undefined;
  /**
   * A bearer token of the gateway's `auth.jwt` (a JWT from your identity provider), or a
   * function that answers a fresh one for each request. Give `apiKey` or `token`, not
   * both; neither for a gateway with `auth: none`.
   */
  token?: string | (() => string | Promise<string>) | undefined;
  /** The HTTP timeout of each request, in milliseconds (see `DEFAULT_TIMEOUT_MS`). */
  timeoutMs?: number | undefined;
  /** Replaces the global `fetch` (a test's scripted gateway, a proxy agent). */
  fetch?: typeof fetch | undefined;
}

/** The headers of a call or a grant. */
export interface GrantOptions {
  /**
   * The caller's key for the operation, sent as `Idempotency-Key`. It never replaces the
   * tool's rendered key; another payload under a key already used is refused with a 422.
   */
  idempotencyKey?: string | undefined;
  /** The application's intent id, sent as `Intent-Id`; without it, the one of the `withIntentId` around the call. */
  intentId?: string | undefined;
}

/** The optional fields of a settle. */
export interface SettleFields {
  /** `done`: what repeats are shown; `rejected`: the provider's refusal. Any JSON, at most 64 KiB. */
  result?: unknown;
  /** `rejected`, `not_executed`, `unknown`: why, for the event log and the model. */
  reason?: string | undefined;
  /** `done`: the provider's id of the effect. */
  externalId?: string | undefined;
  /** `unknown` on an `execute` grant: the provider will answer every same-key re-send the same way. */
  resendStop?: ResendStop | undefined;
}

/** A client of the gateway. One client serves any number of concurrent calls. */
export class Client {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly #apiKey: string | undefined;
  readonly #token: ClientOptions["token"];
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions) {
    if (options.apiKey !== undefined && options.token !== undefined) {
      throw new TypeError("give the Client an apiKey or a token, not both: both would be sent as Authorization: Bearer");
    }
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw new RangeError(`timeoutMs is a positive number of milliseconds, got ${timeoutMs}`);
    }
    this.baseUrl = new URL(options.baseUrl).href.replace(/\/+$/, "");
    this.timeoutMs = timeoutMs;
    this.#apiKey = options.apiKey;
    this.#token = options.token;
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /** `GET /v1/tools`: the tools the caller may use, with `executor` for each. */
  async tools(): Promise<ToolView[]> {
    const answer = (await this.request("GET", "/v1/tools")) as components["schemas"]["ToolList"];
    return answer.tools;
  }

  /**
   * `POST /v1/tools/{tool}/call`: the gateway runs one of its own tools and answers its
   * outcome (`status`, `message`, `result`, ...).
   */
  async call(tool: string, args: Record<string, unknown>, options: GrantOptions = {}): Promise<GatewayOutcome> {
    const path = `/v1/tools/${encodeURIComponent(tool)}/call`;
    return (await this.request("POST", path, { arguments: args }, grantHeaders(options))) as GatewayOutcome;
  }

  /**
   * `POST /v1/tools/{tool}/intents`: asks to run a client-executed tool. Answers
   * `{action: "answer", outcome}`, or an `execute` or `look_up` grant with `intent_id`,
   * `idempotency_key`, `attempt`, `resend` and `lease`.
   */
  async grant(tool: string, args: Record<string, unknown>, options: GrantOptions = {}): Promise<GrantResponse> {
    const path = `/v1/tools/${encodeURIComponent(tool)}/intents`;
    return (await this.request("POST", path, { arguments: args }, grantHeaders(options))) as GrantResponse;
  }

  /**
   * `POST /v1/intents/{id}/renew`: extends the lease whose token is `lease`. Answers
   * `{lease}`; throws `LeaseLost` when the lease is no longer held.
   */
  async renew(intentId: number | string, lease: string): Promise<{ lease: Lease }> {
    return (await this.request("POST", intentPath(intentId, "renew"), { lease })) as { lease: Lease };
  }

  /**
   * `POST /v1/intents/{id}/settle`: reports `outcome`. Answers like `grant` (usually an
   * `answer`; after `not_found` inside the key window, an `execute` grant to re-send);
   * throws `LeaseLost` when the lease is no longer held (nothing was changed).
   */
  async settle(
    intentId: number | string,
    lease: string,
    outcome: SettleOutcome,
    fields: SettleFields = {},
  ): Promise<GrantResponse> {
    const body: Record<string, unknown> = { lease, outcome };
    if ("result" in fields && fields.result !== undefined) {
      body.result = fields.result;
    }
    if (fields.reason !== undefined) {
      body.reason = fields.reason;
    }
    if (fields.externalId !== undefined) {
      body.external_id = fields.externalId;
    }
    if (fields.resendStop !== undefined) {
      body.resend_stop = fields.resendStop;
    }
    return (await this.request("POST", intentPath(intentId, "settle"), body)) as GrantResponse;
  }

  /** `GET /v1/intents/{id}`: the intent as the ledger holds it (scope `intents:read`). */
  async intent(intentId: number | string): Promise<IntentView> {
    return (await this.request("GET", intentPath(intentId))) as IntentView;
  }

  /**
   * Runs `body` as the client-executed tool `tool`, at most once per intent whatever the
   * retries. `body` takes the business arguments and an `EffectContext` whose
   * `idempotencyKey` it sends to the provider; the function returned takes the business
   * arguments only and answers the outcome the model should read. See the package's README
   * for each branch, and `SideEffectOptions` for how errors are classified.
   */
  sideEffect<A extends object, R>(
    tool: string,
    options: SideEffectOptions<A, R>,
    body: (args: A, effect: EffectContext) => R | Promise<R>,
  ): SideEffectFunction<A> {
    return new SideEffect(this, tool, options, body).wrapper();
  }

  /** Sends one request; answers the parsed body of a 2xx. */
  async request(method: "GET" | "POST", path: string, body?: unknown, headers: Record<string, string> = {}): Promise<JsonValue> {
    // Encoded first: a float in the body throws before anything is sent.
    const content = body === undefined ? undefined : stringify(body);
    const sent: Record<string, string> = {
      ...(await traceHeaders()),
      ...headers,
      accept: "application/json, application/problem+json",
    };
    if (content !== undefined) {
      sent["content-type"] = "application/json";
    }
    const bearer = await this.#bearer();
    if (bearer !== undefined) {
      sent.authorization = `Bearer ${bearer}`;
    }
    let response: Response;
    let text: string;
    try {
      const init: RequestInit = { method, headers: sent, signal: AbortSignal.timeout(this.timeoutMs) };
      if (content !== undefined) {
        init.body = content;
      }
      response = await this.#fetch(`${this.baseUrl}${path}`, init);
      text = await response.text();
    } catch (error) {
      throw new GatewayUnreachable(method, path, error);
    }
    let parsed: JsonValue | undefined;
    try {
      parsed = text ? parse(text) : null;
    } catch {
      parsed = undefined;
    }
    if (response.status >= 400) {
      throw errorFromResponse(response.status, parsed === undefined ? text : parsed);
    }
    if (parsed === undefined) {
      throw errorFromResponse(response.status, `the gateway answered ${response.status} with a body that is not JSON: ${text.slice(0, 200)}`);
    }
    return parsed;
  }

  async #bearer(): Promise<string | undefined> {
    if (this.#apiKey !== undefined) {
      return this.#apiKey;
    }
    if (typeof this.#token === "function") {
      return await this.#token();
    }
    return this.#token;
  }
}

function grantHeaders(options: GrantOptions): Record<string, string> {
  const headers: Record<string, string> = {};
  if (options.idempotencyKey !== undefined) {
    headers["idempotency-key"] = options.idempotencyKey;
  }
  const intentId = options.intentId ?? currentIntentId();
  if (intentId !== undefined) {
    headers["intent-id"] = intentId;
  }
  return headers;
}

function intentPath(intentId: number | string, action = ""): string {
  return `/v1/intents/${encodeURIComponent(String(intentId))}${action ? `/${action}` : ""}`;
}
