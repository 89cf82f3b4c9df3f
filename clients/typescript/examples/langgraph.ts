/**
 * The wrapped refund as a tool of LangGraph.js: LangChain's `tool()` with a zod schema of
 * the business arguments, run by a `ToolNode` from the model's tool calls, in a graph whose
 * node has a retry policy. A re-run of the node calls the tool again, and the gateway
 * answers `already_done` with the first refund.
 */

import { ToolMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { END, MessagesAnnotation, type RetryPolicy, START, StateGraph } from "@langchain/langgraph";
import { ToolNode } from "@langchain/langgraph/prebuilt";
import type { Outcome, SideEffectFunction } from "intentgate";
import { z } from "zod";

import { REFUND_DESCRIPTION, type RefundArgs } from "./refund.js";

/** The graph's retry policy for the tools node: two re-runs, soon after a failure. */
export const RETRY_POLICY: RetryPolicy = { maxAttempts: 3, initialInterval: 10, jitter: false };

/** `refund_order` for LangChain: the outcome, as JSON text, is the tool message the model reads. */
export function refundTool(refundOrder: SideEffectFunction<RefundArgs>) {
  return tool(async (input: RefundArgs) => JSON.stringify(await refundOrder(input)), {
    name: "refund_order",
    description: REFUND_DESCRIPTION,
    schema: z.object({
      order_id: z.string().min(1).max(64).describe("The order to refund."),
      amount: z.string().regex(/^[0-9]+(\.[0-9]{1,2})?$/).describe('The amount to refund, e.g. "49.00".'),
    }),
  });
}

/** The state update of a tools node: the tool messages it adds. */
type ToolsUpdate = { messages: ToolMessage[] };
/** A tools node: the `ToolNode` itself, or a step around it. */
type ToolsStep = ToolNode | ((state: typeof MessagesAnnotation.State) => Promise<ToolsUpdate>);

/** A graph of one node, the tools (run on the model's last message), under `retryPolicy`. */
export function refundGraph(tools: ToolsStep, retryPolicy: RetryPolicy = RETRY_POLICY) {
  return new StateGraph(MessagesAnnotation)
    .addNode("tools", tools, { retryPolicy })
    .addEdge(START, "tools")
    .addEdge("tools", END)
    .compile();
}

/** The `ToolNode` of the refund tool. */
export function refundToolNode(refundOrder: SideEffectFunction<RefundArgs>): ToolNode {
  return new ToolNode([refundTool(refundOrder)]);
}

/** The outcomes the tool messages of `messages` carry, in order. */
export function outcomesOf(messages: readonly unknown[]): Outcome[] {
  return messages
    .filter((message): message is ToolMessage => ToolMessage.isInstance(message))
    .map((message) => JSON.parse(String(message.content)) as Outcome);
}

