/**
 * The application's intent id: the id the calling application creates once per business
 * request (a charge the user asked for), for the tools whose key uses `{intent_id}`.
 *
 * The model never supplies it, so it is not an argument of a wrapped function. The
 * application runs the code that serves the request inside `withIntentId(id, fn)`, and
 * every call made there sends it (the `Intent-Id` header). It is held in an
 * `AsyncLocalStorage`: promises, timers and callbacks started inside see the id, and it
 * never leaks from one request into another.
 *
 * @module
 */

import { AsyncLocalStorage } from "node:async_hooks";

/** The longest intent id the gateway takes, in characters (the `Intent-Id` header's limit). */
export const INTENT_ID_LENGTH_MAX = 256;

const current = new AsyncLocalStorage<string>();

/**
 * `value` when it can be sent as an `Intent-Id` header the gateway reads unchanged: a
 * string of 1 to `INTENT_ID_LENGTH_MAX` printable ASCII characters, with no space at either
 * end (the gateway trims the header). Throws before anything is sent otherwise.
 */
export function checkedIntentId(value: unknown): string {
  if (typeof value !== "string") {
    throw new TypeError(`an intent id is a string, got ${typeof value}`);
  }
  if (value.length < 1 || value.length > INTENT_ID_LENGTH_MAX) {
    throw new RangeError(`an intent id is 1 to ${INTENT_ID_LENGTH_MAX} characters, got ${value.length}`);
  }
  if (!/^[\x20-\x7e]+$/.test(value) || value !== value.trim()) {
    throw new RangeError(`an intent id is printable ASCII with no space at either end, got ${JSON.stringify(value)}`);
  }
  return value;
}

/**
 * Runs `serve` (the code that serves one request of the user, such as the agent's run)
 * under the intent id `id`: every wrapped function called inside, and every `call` or
 * `grant` without an `intentId` option, sends it. Create the id once per request of the
 * user, in your application (never from the model's arguments, never per attempt), and
 * serve every retry of that request under the same id. Calls nest; the innermost id counts.
 * Throws `TypeError` or `RangeError` for an id the gateway can't take, before `serve` runs.
 */
export function withIntentId<T>(id: string, serve: () => T): T {
  return current.run(checkedIntentId(id), serve);
}

/** The intent id of the innermost `withIntentId` around this code, or `undefined`. */
export function currentIntentId(): string | undefined {
  return current.getStore();
}
