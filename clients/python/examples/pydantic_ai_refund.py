"""The refund tool of `refund.py` as a tool of Pydantic AI (`@agent.tool_plain`, or
`Agent(tools=[...])`), run by `Agent.run` from a model's tool calls, through the
gateway to the mock payments provider:

    intentgate mock-provider &
    export INTENTGATE_HASH_KEY=$(openssl rand -hex 32)
    intentgate serve --config examples/support-agent.yaml &
    python clients/python/examples/pydantic_ai_refund.py 8812 49.00

The model is Pydantic AI's `FunctionModel`, so the example runs without an LLM: it calls
the tool, then calls it again (as a model that checks its work does), then answers.
The two tool answers are printed as the model read them (JSON): `done`, then
`already_done` with the same refund; the provider holds one refund. `--model NAME` (a
Pydantic AI model name such as `openai:gpt-4.1`, with that provider's package and key
installed) hands the same agent to a real model instead.

Pydantic AI shows the model the tool's return value as JSON, and sends a `ModelRetry` back
to the model as a retry prompt; any other exception ends the run. The decorated function
raises only when the gateway can't be reached or refuses the request
(`intentgate.IntentGateError`), never for the provider's errors.
"""

from __future__ import annotations

import argparse
from decimal import Decimal
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from refund import gateway, payments, refund_order

INSTRUCTIONS = "You are a support agent. Refund what the customer asks for with refund_order_sdk, once."
#: The name the model knows the tool by: the gateway's, since the messages the model reads
#: name that ("Do not call refund_order_sdk again").
TOOL = "refund_order_sdk"


def scripted_model(order_id: str, amount: str) -> FunctionModel:
    """A stand-in for an LLM: asks for the refund, asks again, then answers."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked = sum(isinstance(message, ModelResponse) for message in messages)
        if asked < 2:
            call = ToolCallPart(TOOL, {"order_id": order_id, "amount": amount}, tool_call_id=f"call_{asked + 1}")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart(f"I have asked for the refund of {amount} on order {order_id}.")])

    return FunctionModel(respond)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("order_id")
    parser.add_argument("amount", type=Decimal)
    parser.add_argument("--model", help="a Pydantic AI model name (e.g. openai:gpt-4.1); default: a scripted model")
    args = parser.parse_args()
    model: Any = args.model or scripted_model(args.order_id, str(args.amount))
    agent = Agent(model, instructions=INSTRUCTIONS)
    # The decorated function as the agent's tool: its docstring and signature (less
    # `idempotency_key`) are what the model is shown.
    agent.tool_plain(name=TOOL)(refund_order)
    result = agent.run_sync(f"Please refund {args.amount} on order {args.order_id}.")
    for message in result.all_messages():
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    print(f"{TOOL} answered: {part.model_response_str()}")
    print(f"the agent says: {result.output}")


if __name__ == "__main__":
    try:
        main()
    finally:
        gateway.close()
        payments.close()
