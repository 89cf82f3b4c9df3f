/**
 * The wrapped refund as a tool of the OpenAI Agents SDK for JavaScript: `tool()` with a
 * zod schema of the business arguments, its `execute` the wrapped function, given to an
 * `Agent` that the `Runner` runs turn by turn. The outcome is the tool's output, which the
 * model reads on its next turn.
 */

import { Agent, type Model, run, tool } from "@openai/agents";
import type { Outcome, SideEffectFunction } from "intentgate";
import { z } from "zod";

import { REFUND_DESCRIPTION, type RefundArgs } from "./refund.js";

/** The most turns one run of the agent takes. */
export const MAX_TURNS = 5;

/** `refund_order` for the Agents SDK. */
export function refundTool(refundOrder: SideEffectFunction<RefundArgs>) {
  return tool({
    name: "refund_order",
    description: REFUND_DESCRIPTION,
    parameters: z.object({
      order_id: z.string().min(1).max(64).describe("The order to refund."),
      amount: z.string().regex(/^[0-9]+(\.[0-9]{1,2})?$/).describe('The amount to refund, e.g. "49.00".'),
    }),
    execute: (input) => refundOrder(input),
  });
}

/** The support agent, on `model` (a name of the model provider's, or a `Model`). */
export function supportAgent(model: string | Model, refundOrder: SideEffectFunction<RefundArgs>) {
  return new Agent({
    name: "support",
    instructions: "You are a support agent. Refund orders when asked; check what the tool answers.",
    model,
    tools: [refundTool(refundOrder)],
  });
}

/** Runs the agent on `prompt`; answers the outcome of every refund it made, in order. */
export async function runAgent(model: string | Model, refundOrder: SideEffectFunction<RefundArgs>, prompt: string): Promise<Outcome[]> {
  const result = await run(supportAgent(model, refundOrder), prompt, { maxTurns: MAX_TURNS });
  const outcomes: Outcome[] = [];
  for (const item of result.newItems) {
    if (item.type === "tool_call_output_item") {
      const output = item.output;
      outcomes.push((typeof output === "string" ? JSON.parse(output) : output) as Outcome);
    }
  }
  return outcomes;
}
