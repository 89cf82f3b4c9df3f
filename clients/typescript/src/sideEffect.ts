/**
 * The exchange of a wrapped function with the gateway: ask for a grant, run the function
 * on `execute` (renewing the lease meanwhile), settle what it returned or threw, call the
 * lookup on `look_up`, and answer the outcome the model should read.
 *
 * What the model reads is never an exception: the gateway's outcomes (`done`,
 * `already_done`, `pending_unknown`, `rejected`, `not_executed`, `conflict`, `disabled`,
 * `invalid_arguments`, `awaiting_approval`, `over_budget`) are answered as they are, and a
 * gateway that can't be reached is answered `not_executed` before the function ran and
 * `pending_unknown` after. What is thrown are mistakes of the program: a float in the
 * arguments, a result JSON can't carry (after settling `done` without it), a
 * `resendStop` that failed (after settling), and the gateway's 4xx refusals of the request
 * itself (a wrong API key, an unknown tool), which no retry by a model can fix.
 *
 * @module
 */

import type { Client, GrantResponse, Lease, LeaseGrant, ResendStop, SettleFields, SettleOutcome } from "./client.js";
import { GatewayUnreachable, IntentGateError, LeaseLost, TooManyRounds, describe } from "./errors.js";
import { currentIntentId } from "./intentId.js";
import { type JsonValue, toJsonValue } from "./json.js";
import { type Outcome, unreachableAfterRunning, unreachableBeforeRunning } from "./outcomes.js";

/**
 * How many grant, settle and re-send rounds one call of a wrapped function may go through.
 * A round is one execute or one look-up; the usual worst case is execute (unknown), look-up
 * (not found), re-send, look-up again: four.
 */
export const MAX_ROUNDS = 8;

/**
 * How many times a settle is sent when the gateway could not be reached. The lease is
 * still held meanwhile; a settle that did arrive answers 409 to the repeat, and the
 * wrapper then asks for a grant to learn where the intent stands.
 */
export const SETTLE_ATTEMPTS = 3;

/** The problem the gateway answers (422) for a settled result over its limit (64 KiB). */
export const RESULT_TOO_LARGE = "too-large";

/**
 * The part of a lease's `duration_ms` after which the lease is renewed while the function
 * runs: a third, so two renewals in a row can fail before the lease runs out.
 */
export const RENEW_FRACTION = 3;

/** The shortest pause between two renewals, in milliseconds. */
export const RENEW_INTERVAL_MIN_MS = 50;

/** The three words `resendStop` may answer. */
export const RESEND_STOPS: readonly ResendStop[] = ["replayed_server_error", "provider_says_no_retry", "key_reused"];

/** An error class, matched with `instanceof`. */
export type ErrorClass = abstract new (...args: never[]) => unknown;
/** One error class or several. */
export type ErrorClasses = ErrorClass | readonly ErrorClass[];

/** What the wrapped function's body is given besides the business arguments. */
export interface EffectContext {
  /** The provider key of the intent: send it to the provider as its idempotency key. */
  readonly idempotencyKey: string;
  /** The intent's id in the gateway's ledger. */
  readonly intentId: number;
  /** The attempt this grant is, from 1. */
  readonly attempt: number;
  /** True when this is the same request again, for an intent whose first attempt's outcome is unknown. */
  readonly resend: boolean;
}

/** How a wrapped function's errors and results map onto the intent API's outcomes. */
export interface SideEffectOptions<A, R> {
  /** The provider refused; nothing happened. Settled `rejected`, with the error's message as the reason. */
  rejected?: ErrorClasses;
  /** Certainly nothing reached the provider (a 429). Settled `not_executed`: a later call may run it again. */
  notProcessed?: ErrorClasses;
  /**
   * The outcome is unknown (a timeout, a dropped connection). Settled `unknown`, like any
   * error not listed; listed here, an error is unknown even when it is also an instance of
   * a `rejected` or `notProcessed` class (checked first).
   */
  ambiguous?: ErrorClasses;
  /**
   * Asks the provider whether the effect of an earlier attempt exists, by the key in
   * `effect.idempotencyKey` or by the business fields: answers its record (settled `done`,
   * the record being the result) or `null`/`undefined` (`not_found`); a throw is `unknown`.
   * Without it, an intent whose outcome is unknown is settled `unknown` and stays for the
   * operator (`intentgate intents list --status unknown`).
   */
  lookup?: (args: A, effect: EffectContext) => R | null | undefined | Promise<R | null | undefined>;
  /** The provider's id of a result: the name of one of its fields, or a function of it. */
  externalId?: string | ((result: R) => unknown);
  /**
   * Asked about an error settled `unknown`: a `ResendStop` word when the provider will
   * answer every same-key re-send the same way (a stored 5xx it replays, a 5xx it says not
   * to retry, a key it holds for other parameters), so the gateway grants lookups only;
   * `null` or `undefined` otherwise. If it throws or answers another word, the outcome is
   * settled without it and that error is thrown after.
   */
  resendStop?: (error: unknown) => ResendStop | null | undefined;
}

/** A wrapped function: the body's business arguments in, the outcome the model should read out. */
export type SideEffectFunction<A> = (args: A) => Promise<Outcome>;

/** A settle's optional fields and the error to throw once it is sent. */
interface Settlement {
  outcome: SettleOutcome;
  fields: SettleFields;
  error?: Error;
}

/** How long to wait before renewing `lease`, in milliseconds. */
export function renewIntervalMs(lease: Lease): number {
  return Math.max(lease.duration_ms / RENEW_FRACTION, RENEW_INTERVAL_MIN_MS);
}

/** True for an error that says the gateway could not answer (a transport failure or a 5xx). */
function gatewayFailed(error: unknown): boolean {
  return error instanceof GatewayUnreachable || (error instanceof IntentGateError && error.status >= 500);
}

function asList(classes: ErrorClasses | undefined): readonly ErrorClass[] {
  if (classes === undefined) {
    return [];
  }
  return typeof classes === "function" ? [classes as ErrorClass] : (classes as readonly ErrorClass[]);
}

/** A function wrapped by `Client.sideEffect`, and how its outcomes map. */
export class SideEffect<A extends object, R> {
  readonly #rejected: readonly ErrorClass[];
  readonly #notProcessed: readonly ErrorClass[];
  readonly #ambiguous: readonly ErrorClass[];

  constructor(
    readonly client: Client,
    readonly tool: string,
    readonly options: SideEffectOptions<A, R>,
    readonly body: (args: A, effect: EffectContext) => R | Promise<R>,
  ) {
    if (typeof tool !== "string" || tool.length === 0) {
      throw new TypeError("sideEffect needs the name of a client-executed tool of the gateway's config");
    }
    if (typeof body !== "function") {
      throw new TypeError(`sideEffect(${JSON.stringify(tool)}) needs the function to run`);
    }
    this.#rejected = asList(options.rejected);
    this.#notProcessed = asList(options.notProcessed);
    this.#ambiguous = asList(options.ambiguous);
  }

  /** The function the caller gets: named like the body, taking the business arguments only. */
  wrapper(): SideEffectFunction<A> {
    const wrapped = (args: A): Promise<Outcome> => this.run(args);
    Object.defineProperty(wrapped, "name", { value: this.body.name || this.tool });
    return wrapped;
  }

  /** One call: grants and rounds until the gateway answers an outcome. */
  async run(args: A): Promise<Outcome> {
    if (typeof args !== "object" || args === null || Array.isArray(args)) {
      throw new TypeError(`${this.tool}: the arguments are one object of named values, got ${JSON.stringify(args)}`);
    }
    const call: Call<A> = {
      args,
      // Encoded first: a float in the arguments throws before anything is sent.
      arguments: toJsonValue(args, "arguments") as Record<string, JsonValue>,
      // Read once, so that every grant of this call's rounds sends the same id.
      intentId: currentIntentId(),
    };
    let answer: GrantResponse;
    try {
      answer = await this.#grant(call);
    } catch (error) {
      if (gatewayFailed(error)) {
        return unreachableBeforeRunning(this.tool, describe(error));
      }
      throw error;
    }
    try {
      for (let round = 0; round < MAX_ROUNDS; round += 1) {
        switch (answer.action) {
          case "answer":
            return answer.outcome;
          case "execute":
            answer = await this.#execute(call, answer);
            break;
          case "look_up":
            answer = await this.#lookUp(call, answer);
            break;
          default:
            throw new IntentGateError(200, "about:blank", "Unexpected answer", `unknown action ${JSON.stringify((answer as { action?: unknown }).action)}`);
        }
      }
    } catch (error) {
      if (gatewayFailed(error)) {
        return unreachableAfterRunning(this.tool, describe(error));
      }
      throw error;
    }
    throw new TooManyRounds(`${this.tool}: no answer after ${MAX_ROUNDS} rounds`);
  }

  #grant(call: Call<A>): Promise<GrantResponse> {
    return this.client.grant(this.tool, call.arguments, { intentId: call.intentId });
  }

  async #execute(call: Call<A>, grant: LeaseGrant): Promise<GrantResponse> {
    const renewer = new Renewer(this.client, grant.intent_id, grant.lease);
    let value: R;
    try {
      value = await this.body(call.args, contextOf(grant));
    } catch (error) {
      await renewer.stop();
      const settlement = this.#failure(error);
      let answer = await this.#settle(call, grant, settlement);
      if (settlement.error !== undefined) {
        throw settlement.error;
      }
      if (settlement.outcome === "unknown" && isPendingUnknown(answer)) {
        // The gateway grants the lookup of an unknown intent to the next caller.
        answer = await this.#grant(call);
      }
      return answer;
    }
    await renewer.stop();
    const settlement = this.#done(value);
    const answer = await this.#settle(call, grant, settlement);
    if (settlement.error !== undefined) {
      throw settlement.error;
    }
    return answer;
  }

  async #lookUp(call: Call<A>, grant: LeaseGrant): Promise<GrantResponse> {
    const lookup = this.options.lookup;
    if (lookup === undefined) {
      return this.#settle(call, grant, { outcome: "unknown", fields: { reason: "no lookup is configured in the client" } });
    }
    let record: R | null | undefined;
    try {
      record = await lookup(call.args, contextOf(grant));
    } catch (error) {
      return this.#settle(call, grant, { outcome: "unknown", fields: { reason: `lookup failed: ${describe(error)}` } });
    }
    if (record === null || record === undefined) {
      return this.#settle(call, grant, { outcome: "not_found", fields: {} });
    }
    const settlement = this.#done(record);
    const answer = await this.#settle(call, grant, settlement);
    if (settlement.error !== undefined) {
      throw settlement.error;
    }
    return answer;
  }

  /**
   * Settles, sending again when the gateway can't be reached, and without the result when
   * the gateway refuses it as too large (the effect happened all the same); on `LeaseLost`
   * asks for a grant again and answers that.
   */
  async #settle(call: Call<A>, grant: LeaseGrant, settlement: Settlement): Promise<GrantResponse> {
    const fields: SettleFields = { ...settlement.fields };
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await this.client.settle(grant.intent_id, grant.lease.token, settlement.outcome, fields);
      } catch (error) {
        if (error instanceof LeaseLost) {
          return this.#grant(call);
        }
        if (error instanceof IntentGateError && error.status === 422 && error.kind === RESULT_TOO_LARGE && "result" in fields) {
          delete fields.result;
          continue;
        }
        if (gatewayFailed(error) && attempt < SETTLE_ATTEMPTS) {
          continue;
        }
        throw error;
      }
    }
  }

  /** The settle outcome of an error thrown by the body. */
  classify(error: unknown): SettleOutcome {
    const matches = (classes: readonly ErrorClass[]) => classes.some((type) => error instanceof type);
    if (matches(this.#ambiguous)) {
      return "unknown";
    }
    if (matches(this.#rejected)) {
      return "rejected";
    }
    if (matches(this.#notProcessed)) {
      return "not_executed";
    }
    // An error of a side effect proves nothing about whether it happened.
    return "unknown";
  }

  #failure(error: unknown): Settlement {
    const outcome = this.classify(error);
    const fields: SettleFields = { reason: describe(error) };
    const resendStop = this.options.resendStop;
    if (outcome !== "unknown" || resendStop === undefined) {
      return { outcome, fields };
    }
    let stop: ResendStop | null | undefined;
    try {
      stop = resendStop(error);
    } catch (failed) {
      return { outcome, fields, error: failed instanceof Error ? failed : new Error(describe(failed)) };
    }
    if (stop === null || stop === undefined) {
      return { outcome, fields };
    }
    if (!RESEND_STOPS.includes(stop)) {
      const words = RESEND_STOPS.join(", ");
      return { outcome, fields, error: new RangeError(`resendStop answered ${JSON.stringify(stop)}; it may answer null or one of ${words}`) };
    }
    return { outcome, fields: { ...fields, resendStop: stop } };
  }

  /**
   * The settle of a `done` with `value` as its result, and the encoding error to throw
   * after settling when `value` can't be sent as JSON (a float): the effect happened either
   * way, so the intent is settled `done` without a result first.
   */
  #done(value: R): Settlement {
    const fields: SettleFields = {};
    const externalId = this.#externalIdOf(value);
    if (externalId !== undefined) {
      fields.externalId = externalId;
    }
    if (value === undefined) {
      return { outcome: "done", fields };
    }
    try {
      fields.result = toJsonValue(value, "result");
    } catch (error) {
      return { outcome: "done", fields, error: error as Error };
    }
    return { outcome: "done", fields };
  }

  #externalIdOf(value: R): string | undefined {
    const externalId = this.options.externalId;
    let found: unknown;
    if (typeof externalId === "function") {
      found = externalId(value);
    } else if (typeof externalId === "string" && typeof value === "object" && value !== null) {
      found = (value as Record<string, unknown>)[externalId];
    }
    return found === undefined || found === null ? undefined : String(found);
  }
}

/** One call of a wrapped function. */
interface Call<A> {
  /** The business arguments as the caller passed them (for the body and the lookup). */
  readonly args: A;
  /** The same, as JSON values (what the gateway gets). */
  readonly arguments: Record<string, JsonValue>;
  /** The application's intent id around the call, or undefined. */
  readonly intentId: string | undefined;
}

function contextOf(grant: LeaseGrant): EffectContext {
  return { idempotencyKey: grant.idempotency_key, intentId: grant.intent_id, attempt: grant.attempt, resend: grant.resend };
}

/** True for an answer whose outcome is `pending_unknown`. */
function isPendingUnknown(answer: GrantResponse): boolean {
  return answer.action === "answer" && answer.outcome.status === "pending_unknown";
}

/**
 * Renews a lease from a timer while a body runs. A lost lease stops it; a failed renewal is
 * tried again at the next interval.
 */
class Renewer {
  #timer: ReturnType<typeof setTimeout> | undefined;
  #renewal: Promise<void> | undefined;
  #stopped = false;

  constructor(
    readonly client: Client,
    readonly intentId: number,
    lease: Lease,
  ) {
    this.#schedule(lease);
  }

  #schedule(lease: Lease): void {
    this.#timer = setTimeout(() => {
      this.#renewal = this.#renew(lease);
    }, renewIntervalMs(lease));
  }

  async #renew(lease: Lease): Promise<void> {
    let next = lease;
    try {
      next = (await this.client.renew(this.intentId, lease.token)).lease;
    } catch (error) {
      if (error instanceof LeaseLost) {
        return;
      }
    }
    if (!this.#stopped) {
      this.#schedule(next);
    }
  }

  /** Stops renewing, and waits for a renewal under way. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#renewal;
  }
}
