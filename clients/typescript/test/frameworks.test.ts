/**
 * The wrapped refund as a tool of three agent frameworks, each driven by a scripted model
 * (no LLM), calling the mock provider through the real gateway: the schema the model is
 * shown, a repeat answered `already_done`, and the four-layer retry storm (`storm.ts`),
 * whose figures each test prints.
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { AIMessage, HumanMessage } from "@langchain/core/messages";
import { Usage, setTracingDisabled, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";
import type { LanguageModelV3CallOptions, LanguageModelV3GenerateResult } from "@ai-sdk/provider";
import { MockLanguageModelV3 } from "ai/test";
import { Client, type Outcome, type SideEffectFunction } from "intentgate";

import { outcomesOf, refundGraph, refundToolNode } from "../examples/langgraph.js";
import * as agents from "../examples/openai-agents.js";
import type { Refund, RefundArgs } from "../examples/refund.js";
import * as vercel from "../examples/vercel-ai.js";
import { AMOUNT, providerKey, refundTool, startBoth } from "./processes.js";
import { LAYERS, stormThrough } from "./storm.js";

// The Agents SDK exports traces to OpenAI by default; these runs have no account.
setTracingDisabled(true);

/** What the user asks the agent, and how the scripted models read the order back. */
function prompt(orderId: string): string {
  return `Please refund ${AMOUNT} of order ${orderId}.`;
}
function orderIn(text: string): string {
  const found = /order ([A-Za-z0-9-]+)\./.exec(text);
  assert.ok(found !== null, `no order in ${JSON.stringify(text)}`);
  return found[1] as string;
}

/** The tool calls of one model step: the refund, `LAYERS.model` times. */
function refundCalls(orderId: string, step: number): { id: string; input: RefundArgs }[] {
  return Array.from({ length: LAYERS.model }, (_, index) => ({
    id: `call_${step}_${index}`,
    input: { order_id: orderId, amount: AMOUNT },
  }));
}

/**
 * A model for the AI SDK that asks for the refund twice in each of its first
 * `LAYERS.framework` steps (the agent loop running the tool step again), then answers.
 */
function scriptedAiModel(): MockLanguageModelV3 {
  const usage = {
    inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: 1, text: 1, reasoning: 0 },
  };
  return new MockLanguageModelV3({
    doGenerate: async (options: LanguageModelV3CallOptions): Promise<LanguageModelV3GenerateResult> => {
      const step = options.prompt.filter((message) => message.role === "assistant").length;
      const user = options.prompt.find((message) => message.role === "user");
      const text = user?.content.map((part) => (part.type === "text" ? part.text : "")).join("") ?? "";
      if (step >= LAYERS.framework) {
        return { content: [{ type: "text", text: "The refund is recorded." }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
      }
      return {
        content: refundCalls(orderIn(text), step).map(({ id, input }) => ({
          type: "tool-call" as const,
          toolCallId: id,
          toolName: "refund_order",
          input: JSON.stringify(input),
        })),
        finishReason: { unified: "tool-calls", raw: "tool_calls" },
        usage,
        warnings: [],
      };
    },
  });
}

/**
 * A model for the Agents SDK that asks for the refund twice in each of its first
 * `LAYERS.framework` turns (the runner's next turn running the tool again), then answers.
 */
class ScriptedAgentsModel implements Model {
  readonly requests: ModelRequest[] = [];

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.requests.push(request);
    const items = typeof request.input === "string" ? [] : request.input;
    const turn = items.filter((item) => item.type === "function_call").length / LAYERS.model;
    const text = typeof request.input === "string" ? request.input : JSON.stringify(items[0]);
    if (turn >= LAYERS.framework) {
      return {
        usage: new Usage(),
        output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "The refund is recorded." }] }],
      };
    }
    return {
      usage: new Usage(),
      output: refundCalls(orderIn(text), turn).map(({ id, input }) => ({
        type: "function_call" as const,
        callId: id,
        name: "refund_order",
        arguments: JSON.stringify(input),
        status: "completed" as const,
      })),
    };
  }

  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("the scripted model does not stream");
  }
}

/** The model's message asking for the refund `LAYERS.model` times, for LangGraph's ToolNode. */
function toolCallMessage(orderId: string, step: number): AIMessage {
  return new AIMessage({
    content: "",
    tool_calls: refundCalls(orderId, step).map(({ id, input }) => ({ id, name: "refund_order", args: input, type: "tool_call" as const })),
  });
}

/** What broke after the tools ran, in the tools step: the graph's retry policy re-runs the step. */
class StepFailed extends Error {
  override name = "StepFailed";
}

/**
 * One run of the LangGraph agent: the model's message goes to a tools step that runs the
 * `ToolNode` and fails after it the first time, so the node's retry policy runs it again.
 */
async function runGraph(orderId: string, refundOrder: SideEffectFunction<RefundArgs>): Promise<Outcome[]> {
  const node = refundToolNode(refundOrder);
  let runs = 0;
  const graph = refundGraph(
    async (state) => {
      const update = (await node.invoke(state)) as { messages: never[] };
      runs += 1;
      if (runs < LAYERS.framework) {
        throw new StepFailed(`the step failed after its tools ran (run ${runs})`);
      }
      return update;
    },
    { maxAttempts: LAYERS.framework, initialInterval: 1, jitter: false, logWarning: false, retryOn: (error) => error instanceof StepFailed },
  );
  const state = await graph.invoke({ messages: [new HumanMessage(prompt(orderId)), toolCallMessage(orderId, 0)] });
  return outcomesOf(state.messages);
}

describe("frameworks", () => {
  let parts: Awaited<ReturnType<typeof startBoth>>;
  let client: Client;
  const figures: string[] = [];

  before(async () => {
    parts = await startBoth("frameworks");
    client = new Client({ baseUrl: parts.gateway.url, timeoutMs: 30_000 });
  });
  after(async () => {
    await parts.stop();
    console.log(`\nThe storm's figures, per framework:\n${figures.join("\n")}`);
  });

  test("Vercel AI SDK: tool() shows the model the business arguments, and a repeat is already_done", async () => {
    const model = scriptedAiModel();
    const outcomes = await vercel.runAgent(model, refundTool(client, parts.mock.url), prompt("ai-1"));
    const shown = model.doGenerateCalls[0]?.tools?.[0];
    assert.ok(shown !== undefined && shown.type === "function", JSON.stringify(shown));
    assert.equal(shown.name, "refund_order");
    assert.deepEqual(Object.keys((shown.inputSchema as { properties: object }).properties).sort(), ["amount", "order_id"]);
    assert.equal(outcomes.length, LAYERS.model * LAYERS.framework);
    assert.equal(outcomes.filter((outcome) => outcome.status === "done").length, 1, JSON.stringify(outcomes));
    assert.ok(outcomes.every((outcome) => ["done", "already_done"].includes(outcome.status)), JSON.stringify(outcomes));
    assert.equal(new Set(outcomes.map((outcome) => (outcome.result as Refund).id)).size, 1);
    assert.equal((await parts.mock.effects()).by_intent_key[providerKey("ai-1")], 1);
  });

  test("LangGraph.js: ToolNode runs the tool from an AIMessage's tool_calls, and a retried node is already_done", async () => {
    const outcomes = await runGraph("graph-1", refundTool(client, parts.mock.url));
    assert.equal(outcomes.length, LAYERS.model);
    assert.ok(outcomes.every((outcome) => outcome.status === "already_done"), JSON.stringify(outcomes));
    assert.equal((await parts.mock.effects()).by_intent_key[providerKey("graph-1")], 1);
  });

  test("OpenAI Agents SDK: tool() shows the model the business arguments, and a repeat is already_done", async () => {
    const model = new ScriptedAgentsModel();
    const outcomes = await agents.runAgent(model, refundTool(client, parts.mock.url), prompt("agents-1"));
    const shown = model.requests[0]?.tools[0] as { name: string; parameters: { properties: object } } | undefined;
    assert.ok(shown !== undefined);
    assert.equal(shown.name, "refund_order");
    assert.deepEqual(Object.keys(shown.parameters.properties).sort(), ["amount", "order_id"]);
    assert.equal(outcomes.length, LAYERS.model * LAYERS.framework);
    assert.equal(outcomes.filter((outcome) => outcome.status === "done").length, 1, JSON.stringify(outcomes));
    assert.equal(new Set(outcomes.map((outcome) => (outcome.result as Refund).id)).size, 1);
    assert.equal((await parts.mock.effects()).by_intent_key[providerKey("agents-1")], 1);
  });

  // Each storm has a gateway and a provider of its own, so that their counts are its own.
  async function storm(framework: string, runAgent: Parameters<typeof stormThrough>[3]): Promise<void> {
    const own = await startBoth(`storm-${framework}`);
    try {
      const stormClient = new Client({ baseUrl: own.gateway.url, timeoutMs: 30_000 });
      figures.push(await stormThrough(framework, own.mock, refundTool(stormClient, own.mock.url), runAgent));
    } finally {
      await own.stop();
    }
  }

  test("the storm through the Vercel AI SDK: one effect per intent, every answer true", () =>
    storm("vercel-ai", (orderId, refundOrder) => vercel.runAgent(scriptedAiModel(), refundOrder, prompt(orderId))));

  test("the storm through LangGraph.js: one effect per intent, every answer true", () => storm("langgraph", runGraph));

  test("the storm through the OpenAI Agents SDK: one effect per intent, every answer true", () =>
    storm("openai-agents", (orderId, refundOrder) => agents.runAgent(new ScriptedAgentsModel(), refundOrder, prompt(orderId))));
});
