/**
 * The wrapped refund as a tool of the Vercel AI SDK: `tool()` with a zod schema of the
 * business arguments, its `execute` the wrapped function, and `generateText` running the
 * agent's steps. The outcome (`done`, `already_done`, `pending_unknown`, ...) is the tool's
 * result, which the model reads: it is never thrown.
 */

import { type LanguageModel, generateText, stepCountIs, tool } from "ai";
import type { Outcome, SideEffectFunction } from "intentgate";
import { z } from "zod";

import { REFUND_DESCRIPTION, type RefundArgs } from "./refund.js";

/** The most steps (model calls) one run of the agent takes. */
export const MAX_STEPS = 5;

/** `refund_order` for the AI SDK. */
export function refundTool(refundOrder: SideEffectFunction<RefundArgs>) {
  return tool({
    description: REFUND_DESCRIPTION,
    inputSchema: z.object({
      order_id: z.string().min(1).max(64).describe("The order to refund."),
      amount: z.string().regex(/^[0-9]+(\.[0-9]{1,2})?$/).describe('The amount to refund, e.g. "49.00".'),
    }),
    execute: (input) => refundOrder(input),
  });
}

/** Runs the agent on `prompt`; answers the outcome of every refund it made, in order. */
export async function runAgent(model: LanguageModel, refundOrder: SideEffectFunction<RefundArgs>, prompt: string): Promise<Outcome[]> {
  const result = await generateText({
    model,
    system: "You are a support agent. Refund orders when asked; check what the tool answers.",
    prompt,
    tools: { refund_order: refundTool(refundOrder) },
    stopWhen: stepCountIs(MAX_STEPS),
  });
  return result.steps.flatMap((step) => step.toolResults.map((toolResult) => toolResult.output as Outcome));
}
