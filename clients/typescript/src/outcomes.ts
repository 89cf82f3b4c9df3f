/**
 * What a wrapped function answers: the gateway's `Outcome` (the OpenAPI document's
 * schema, `src/openapi.ts`), and the two outcomes the client makes itself when the gateway
 * can't be reached, so that a model is told what happened instead of a framework seeing an
 * exception.
 *
 * @module
 */

import type { components } from "./openapi.js";

/** The gateway's outcome of a call, for the model: `status`, `message`, `result`, ... */
export type GatewayOutcome = components["schemas"]["Outcome"];

/** Every `status` an outcome has (`done`, `already_done`, `pending_unknown`, ...). */
export type OutcomeStatus = GatewayOutcome["status"];

/**
 * The `reason` of an outcome the client made because the gateway could not be reached (a
 * connection refused, a timeout, a 5xx): `not_executed` when it happened before the
 * function ran, `pending_unknown` after.
 */
export const GATEWAY_UNREACHABLE = "gateway_unreachable";

/**
 * The `reason` of an `invalid_arguments` outcome whose call lacked the application's
 * intent id: the tool's key uses `{intent_id}` (its listing says `needs_intent_id`), and
 * only the application can send one (`withIntentId`, the `intentId` option, the
 * `Intent-Id` header). Nothing was done, and the same call gets the same answer.
 */
export const MISSING_INTENT_ID = "missing_intent_id";

/** What a wrapped function answers: the gateway's outcome, or one the client made (`reason: "gateway_unreachable"`). */
export type Outcome = Omit<GatewayOutcome, "reason"> & {
  reason?: GatewayOutcome["reason"] | typeof GATEWAY_UNREACHABLE;
};

/** The outcome of a call whose first grant never got an answer: the function did not run. */
export function unreachableBeforeRunning(tool: string, detail: string): Outcome {
  return {
    status: "not_executed",
    reason: GATEWAY_UNREACHABLE,
    message:
      `Nothing was done: ${tool} was not run, because the service that records it could not be reached (${detail}). ` +
      "It is safe to call it again later; if it keeps failing, tell the user it can't be done right now.",
    tool,
  };
}

/** The outcome of a call that lost the gateway after its function ran or its lookup began. */
export function unreachableAfterRunning(tool: string, detail: string): Outcome {
  return {
    status: "pending_unknown",
    reason: GATEWAY_UNREACHABLE,
    message:
      `The outcome is not known yet: ${tool} may have run, and the service that records it could not be reached (${detail}). ` +
      `Do not assume it failed. Calling ${tool} again with the same arguments later is safe: it will not run twice, and answers what happened.`,
    tool,
  };
}
