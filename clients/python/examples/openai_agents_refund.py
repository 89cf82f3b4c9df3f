"""The refund tool of `refund.py` as a tool of the OpenAI Agents SDK (`agents.function_tool`),
run by `Runner.run` from a model's function calls, through the gateway to the mock payments
provider:

    intentgate mock-provider &
    export INTENTGATE_HASH_KEY=$(openssl rand -hex 32)
    intentgate serve --config examples/support-agent.yaml &
    python clients/python/examples/openai_agents_refund.py 8812 49.00

The model is the SDK's own test double (`agents.testing.ScriptedModel`), so the example
runs without an LLM: it calls the tool, then calls it again (as a model that checks
its work does), then answers. The two tool answers are printed as the model read them:
`done`, then `already_done` with the same refund; the provider holds one refund.
`--model NAME` (an OpenAI model, with `OPENAI_API_KEY` set) hands the same agent to a real
model instead.

The SDK shows the model `str()` of what the tool returns (the decorator's outcome dict),
and answers a tool that raised with "An error occurred while running the tool. Please try
again."; the decorated function raises only when the gateway can't be reached or refuses
the request (`intentgate.IntentGateError`), never for the provider's errors.
"""

from __future__ import annotations

import argparse
import asyncio
from decimal import Decimal

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from refund import gateway, payments, refund_order

INSTRUCTIONS = "You are a support agent. Refund what the customer asks for with refund_order_sdk, once."

#: The name the model knows the tool by: the gateway's, since the messages the model reads
#: name that ("Do not call refund_order_sdk again").
TOOL = "refund_order_sdk"

#: The decorated function as the SDK's tool: its docstring and signature (less
#: `idempotency_key`) are what the model is shown.
refund_tool = function_tool(refund_order, name_override=TOOL)


def scripted_model(order_id: str, amount: str) -> ScriptedModel:
    """A stand-in for an LLM: asks for the refund, asks again, then answers."""
    arguments = {"order_id": order_id, "amount": amount}
    return ScriptedModel(
        [
            [function_call(TOOL, arguments, call_id="call_1")],
            [function_call(TOOL, arguments, call_id="call_2")],
            [assistant_message(f"I have asked for the refund of {amount} on order {order_id}.")],
        ]
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("order_id")
    parser.add_argument("amount", type=Decimal)
    parser.add_argument("--model", help="an OpenAI model name (needs OPENAI_API_KEY); default: a scripted model")
    args = parser.parse_args()
    if args.model is None:
        set_tracing_disabled(True)  # nothing to send traces to without an OpenAI key
    model = args.model or scripted_model(args.order_id, str(args.amount))
    agent = Agent(name="support", instructions=INSTRUCTIONS, tools=[refund_tool], model=model)
    result = await Runner.run(agent, f"Please refund {args.amount} on order {args.order_id}.")
    for item in result.new_items:
        if item.type == "tool_call_output_item":
            print(f"{TOOL} answered: {item.output}")
    print(f"the agent says: {result.final_output}")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    finally:
        gateway.close()
        payments.close()
