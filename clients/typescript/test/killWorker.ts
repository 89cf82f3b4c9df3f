/**
 * The worker the kill test SIGKILLs: calls the refund tool with a body that sends the
 * refund, prints `{"sent": status, "key": ...}` and then never returns.
 *
 * Usage: node build/test/killWorker.js GATEWAY_URL MOCK_URL ORDER_ID AMOUNT
 */

import { Client } from "intentgate";
import { PROCESS_WAIT_MS, type RefundArgs } from "./processes.js";

const [gatewayUrl, mockUrl, orderId, amount] = process.argv.slice(2) as [string, string, string, string];
const client = new Client({ baseUrl: gatewayUrl, timeoutMs: 30_000 });

const refundOrder = client.sideEffect<RefundArgs, never>("refund_order", {}, async ({ order_id, amount }, { idempotencyKey }) => {
  const response = await fetch(`${mockUrl}/v1/refunds`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": idempotencyKey },
    body: JSON.stringify({ order_id, amount, metadata: { intent_key: idempotencyKey } }),
    signal: AbortSignal.timeout(PROCESS_WAIT_MS),
  });
  process.stdout.write(`${JSON.stringify({ sent: response.status, key: idempotencyKey })}\n`);
  // Runs until killed: a pending timer keeps the process alive, as a slow call would.
  setInterval(() => {}, 60_000);
  return new Promise<never>(() => {});
});

await refundOrder({ order_id: orderId, amount });
