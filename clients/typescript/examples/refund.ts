/**
 * The refund every framework example uses: a function of the application that refunds an
 * order at a payments API (the project's mock provider, `intentgate mock-provider`),
 * wrapped by `sideEffect` as the gateway's client-executed tool `refund_order`. Its errors
 * say what happened: a declined card is `rejected`, a rate limit is `notProcessed`, and
 * anything else (a timeout, a 5xx) is unknown and looked up by the key.
 */

import { Client, type EffectContext, type SideEffectFunction } from "intentgate";

/** What the model fills in: the business arguments only, never the key. */
export interface RefundArgs extends Record<string, unknown> {
  order_id: string;
  /** A decimal string, e.g. `"49.00"`: amounts never pass through a float. */
  amount: string;
}

/** A refund as the payments API answers it. */
export interface Refund {
  id: string;
  order_id: string;
  amount: string;
  created_ms: number;
}

/** The tool's description, the same in every framework. */
export const REFUND_DESCRIPTION = "Refund part or all of an order. Safe to call once per order and amount: repeats answer the first result.";

/** The provider refused the refund (402): nothing happened. */
export class CardDeclined extends Error {
  override name = "CardDeclined";
}

/** The provider answered 429 before processing anything. */
export class RateLimited extends Error {
  override name = "RateLimited";
}

/** The payments API's answer to a request that took too long, in milliseconds. */
export const PAYMENTS_TIMEOUT_MS = 10_000;

/** `refundOrder({order_id, amount})`, run through `gateway` as its tool `tool`, refunding at `paymentsUrl`. */
export function refundOrderAt(
  gateway: Client,
  paymentsUrl: string,
  { tool = "refund_order", timeoutMs = PAYMENTS_TIMEOUT_MS }: { tool?: string; timeoutMs?: number } = {},
): SideEffectFunction<RefundArgs> {
  async function findRefund(_args: RefundArgs, { idempotencyKey }: EffectContext): Promise<Refund | null> {
    const found = await fetch(`${paymentsUrl}/v1/refunds?idempotency_key=${encodeURIComponent(idempotencyKey)}`, {
      signal: AbortSignal.timeout(timeoutMs),
    });
    if (!found.ok) {
      throw new Error(`the payments API's list answered ${found.status}`);
    }
    const { data } = (await found.json()) as { data: Refund[] };
    return data[0] ?? null;
  }

  return gateway.sideEffect<RefundArgs, Refund>(
    tool,
    { rejected: CardDeclined, notProcessed: RateLimited, lookup: findRefund, externalId: "id" },
    async function refundOrder({ order_id, amount }, { idempotencyKey }) {
      const response = await fetch(`${paymentsUrl}/v1/refunds`, {
        method: "POST",
        headers: { "content-type": "application/json", "idempotency-key": idempotencyKey },
        body: JSON.stringify({ order_id, amount, metadata: { intent_key: idempotencyKey } }),
        signal: AbortSignal.timeout(timeoutMs),
      });
      if (response.status === 402) {
        throw new CardDeclined(((await response.json()) as { error: { message: string } }).error.message);
      }
      if (response.status === 429) {
        throw new RateLimited("rate limited");
      }
      if (!response.ok) {
        // A 5xx is not listed above, so it counts as unknown.
        throw new Error(`the payments API answered ${response.status}`);
      }
      return (await response.json()) as Refund;
    },
  );
}
