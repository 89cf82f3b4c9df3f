/**
 * The errors the client throws: the gateway's `application/problem+json` answers
 * (`IntentGateError`, `LeaseLost`), a gateway that could not be reached
 * (`GatewayUnreachable`), and a call that went through too many rounds (`TooManyRounds`).
 *
 * @module
 */

/** The prefix of every problem type the gateway sends (`urn:intentgate:problem:lease-lost`). */
export const PROBLEM_TYPE_PREFIX = "urn:intentgate:problem:";

/**
 * The gateway answered a 4xx or 5xx. The fields are those of its problem+json body
 * (RFC 9457): `status` (the HTTP status), `type` (`urn:intentgate:problem:<kind>`),
 * `title` and `detail` (what is wrong and how to fix it). `problem` is the whole body as
 * parsed, `{}` when the answer was not problem+json.
 */
export class IntentGateError extends Error {
  override name = "IntentGateError";
  readonly status: number;
  readonly type: string;
  readonly title: string;
  readonly detail: string;
  readonly problem: Record<string, unknown>;

  constructor(status: number, type = "about:blank", title = "", detail = "", problem: Record<string, unknown> = {}) {
    super(detail ? `${status} ${title || type}: ${detail}` : `${status} ${title || type}`);
    this.status = status;
    this.type = type;
    this.title = title;
    this.detail = detail;
    this.problem = problem;
  }

  /** The short name of the problem (`lease-lost`), or the whole type when it is not one of the gateway's. */
  get kind(): string {
    return this.type.startsWith(PROBLEM_TYPE_PREFIX) ? this.type.slice(PROBLEM_TYPE_PREFIX.length) : this.type;
  }
}

/**
 * 409 `lease-lost`: the lease sent with a renew or settle is no longer the intent's (it
 * expired and another caller took the intent, or the intent was settled). Nothing was
 * changed. Ask for a grant again to learn where the intent stands.
 */
export class LeaseLost extends IntentGateError {
  override name = "LeaseLost";
}

/**
 * The gateway could not be reached, or did not answer within the client's timeout. The
 * request may or may not have arrived: `cause` is the error of `fetch`.
 */
export class GatewayUnreachable extends Error {
  override name = "GatewayUnreachable";

  constructor(method: string, path: string, cause: unknown) {
    super(`${method} ${path}: the gateway could not be reached (${describe(cause)})`, { cause });
  }
}

/**
 * A wrapped side effect went through more grant, settle and re-send rounds than its bound
 * without the gateway answering. The intent is in the gateway's ledger; a later call of the
 * same function picks it up where it stands.
 */
export class TooManyRounds extends Error {
  override name = "TooManyRounds";
}

/** The text a settle or an error reports for a thrown value: its message, or its type's name. */
export function describe(error: unknown): string {
  if (error instanceof Error) {
    const message = error.message.trim();
    const cause = error.cause instanceof Error && error.cause.message ? ` (${error.cause.message})` : "";
    return (message || error.name || "Error") + cause;
  }
  const text = String(error).trim();
  return text || typeof error;
}

/** The typed error of a 4xx or 5xx answer whose body parsed to `body`. */
export function errorFromResponse(status: number, body: unknown): IntentGateError {
  const problem =
    typeof body === "object" && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : undefined;
  const type = problem?.type === undefined ? "about:blank" : String(problem.type);
  const title = problem?.title === undefined ? "" : String(problem.title);
  const detail =
    problem !== undefined ? (problem.detail === undefined ? "" : String(problem.detail)) : body ? String(body) : "";
  const error =
    status === 409 && type === `${PROBLEM_TYPE_PREFIX}lease-lost`
      ? new LeaseLost(status, type, title, detail, problem)
      : new IntentGateError(status, type, title, detail, problem);
  return error;
}
