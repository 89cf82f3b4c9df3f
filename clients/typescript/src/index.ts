/**
 * The TypeScript client of intentgate, the retry-safe tool gateway for AI agents.
 *
 * `new Client({ baseUrl, apiKey })` speaks the gateway's HTTP API; `client.sideEffect(tool,
 * options, body)` wraps a function of yours so that it runs at most once per business
 * intent, however many layers retry it, and answers the outcome the model should read.
 *
 * @module
 */

export {
  Client,
  DEFAULT_TIMEOUT_MS,
  type ClientOptions,
  type GrantOptions,
  type GrantResponse,
  type IntentView,
  type Lease,
  type LeaseGrant,
  type ResendStop,
  type SettleFields,
  type SettleOutcome,
  type ToolView,
} from "./client.js";
export { GatewayUnreachable, IntentGateError, LeaseLost, PROBLEM_TYPE_PREFIX, TooManyRounds } from "./errors.js";
export { INTENT_ID_LENGTH_MAX, currentIntentId, withIntentId } from "./intentId.js";
export { type JsonValue, parse as parseJson, stringify as stringifyJson, toJsonValue } from "./json.js";
export type { components, paths } from "./openapi.js";
export {
  GATEWAY_UNREACHABLE,
  MISSING_INTENT_ID,
  type GatewayOutcome,
  type Outcome,
  type OutcomeStatus,
} from "./outcomes.js";
export {
  MAX_ROUNDS,
  RESEND_STOPS,
  SETTLE_ATTEMPTS,
  type EffectContext,
  type ErrorClass,
  type ErrorClasses,
  type SideEffectFunction,
  type SideEffectOptions,
} from "./sideEffect.js";
