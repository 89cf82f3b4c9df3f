"""The decorated function as a tool of the OpenAI Agents SDK: `agents.function_tool` reads its
signature (no `idempotency_key` in the schema the model is shown), and `Runner.run` runs it
from a model's function calls, against the live gateway. The model is the SDK's own test
double (`agents.testing.ScriptedModel`): no LLM, no network beyond loopback, tracing off.

What the SDK does with the tool, as these tests show it: a `def` tool runs in a thread of
asyncio's default executor (with the caller's context, so an `intentgate.intent_id` block
around `Runner.run` reaches it); the function calls of one model response run at once; the
return value is shown to the model as `str(value)`; an exception is not retried by the SDK
but turned into "An error occurred while running the tool. Please try again." for the model,
which then calls again. The decorator raises only when the gateway can't be reached or
refuses the request itself, so the model never reads that for a provider's error."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import threading
from typing import Any

import pytest

import agent_storm
import intentgate
from agent_storm import AMOUNT, HTTP_RETRIES, ModelUnavailable, Script
from processes import PROCESS_WAIT_SECONDS, Gateway, Mock, refund_tool, run_example

# Before the SDK is imported: it must not try to send traces anywhere.
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
agents = pytest.importorskip("agents", reason="openai-agents is not installed (pip install -r tests/requirements.txt)")
agents_testing = pytest.importorskip("agents.testing", reason="openai-agents is not installed")
agents.set_tracing_disabled(True)

#: No test here reaches past the loopback interface (a model's API, a trace exporter).
pytestmark = pytest.mark.usefixtures("loopback_only")

INSTRUCTIONS = "You are a support agent. Refund what the customer asks for with refund_order."
#: What the SDK shows the model when a tool raised (its default `failure_error_function`).
TOOL_ERROR_MESSAGE = "An error occurred while running the tool. Please try again."


def shown(output: Any) -> dict[str, Any]:
    """The outcome in a tool message the SDK gave the model: `str()` of the dict."""
    assert isinstance(output, str), output
    assert output != TOOL_ERROR_MESSAGE, "the tool raised, and the model was told to try again"
    outcome = ast.literal_eval(output)
    assert isinstance(outcome, dict), output
    return outcome


def tool_outputs(call: Any) -> dict[str, Any]:
    """The tool messages in the input of one model request, by call id."""
    return {item["call_id"]: item["output"] for item in call.input if isinstance(item, dict) and item.get("type") == "function_call_output"}


def asker(tool: Any) -> agent_storm.Ask:
    """One run of an agent with `tool`, whose scripted model follows a `Script`."""

    async def ask(script: Script) -> None:
        read: set[str] = set()

        def read_answers(call: Any) -> None:
            for call_id, output in tool_outputs(call).items():
                if call_id not in read:
                    read.add(call_id)
                    script.read(call_id, shown(output))

        def turn(number: int) -> Any:
            def respond(call: Any) -> list[Any]:
                read_answers(call)
                arguments = {"order_id": script.order_id, "amount": AMOUNT}
                return [agents_testing.function_call("refund_order", arguments, call_id=call_id) for call_id in script.call_ids(number)]

            return agents_testing.ModelStep.respond(respond)

        def end(call: Any) -> list[Any]:
            read_answers(call)
            if script.fail_at_end:
                raise ModelUnavailable("the model's API answered 500")
            return [agents_testing.assistant_message("Your refund is on its way.")]

        model = agents_testing.ScriptedModel([*(turn(number) for number in range(script.turns)), agents_testing.ModelStep.respond(end)])
        agent = agents.Agent(name="support", instructions=INSTRUCTIONS, tools=[tool], model=model)
        await agents.Runner.run(agent, f"Please refund {AMOUNT} on order {script.order_id}.")
        model.assert_complete()

    return ask


def test_function_tool_shows_the_business_arguments_only(mock: Mock, gateway: Gateway) -> None:
    with intentgate.Client(gateway.url, timeout=30) as client:
        tool = agents.function_tool(refund_tool(client, mock.url))

    assert tool.name == "refund_order"
    assert tool.description.startswith("Refund part or all of an order.")
    schema = tool.params_json_schema
    assert set(schema["properties"]) == {"order_id", "amount"}
    assert schema["required"] == ["order_id", "amount"]
    # A `Decimal` is shown as a number or a string; either is one intent (below).
    assert {"type": "number"} in schema["properties"]["amount"]["anyOf"], schema


def test_the_runner_runs_the_decorated_function_once_per_intent(mock: Mock, gateway: Gateway) -> None:
    # The model asks for the refund, writing the amount as a number, then (in its next turn)
    # as a string; then answers.
    calls = [
        [agents_testing.function_call("refund_order", {"order_id": "agents-1", "amount": 7.5}, call_id="call_1")],
        [agents_testing.function_call("refund_order", {"order_id": "agents-1", "amount": "7.50"}, call_id="call_2")],
        [agents_testing.assistant_message("Refunded.")],
    ]
    with intentgate.Client(gateway.url, timeout=30) as client:
        model = agents_testing.ScriptedModel(calls)
        agent = agents.Agent(name="support", instructions=INSTRUCTIONS, tools=[agents.function_tool(refund_tool(client, mock.url))], model=model)
        result = asyncio.run(agents.Runner.run(agent, "Please refund 7.50 on order agents-1."))

    assert result.final_output == "Refunded."
    outputs = tool_outputs(model.last_call)
    first, second = shown(outputs["call_1"]), shown(outputs["call_2"])
    assert first["status"] == "done", first
    assert second["status"] == "already_done", second
    assert first["result"]["id"] == second["result"]["id"]
    assert mock.effects()["by_intent_key"] == {"refund_order:refund:agents-1:7.50": 1}


@pytest.mark.parametrize("storm", list(agent_storm.STORMS))
def test_the_retry_storm_through_the_runner_makes_one_refund_per_intent(mock: Mock, gateway: Gateway, storm: str) -> None:
    with intentgate.Client(gateway.url, timeout=30) as client:
        tool = agents.function_tool(refund_tool(client, mock.url, http_retries=HTTP_RETRIES))
        agent_storm.run_and_check("openai-agents", storm, asker(tool), mock)


def test_what_the_model_reads_for_outcomes_that_are_not_done(mock: Mock, gateway: Gateway) -> None:
    """A refused refund, one whose outcome is unknown, and a gateway that can't be reached:
    the first two are the decorator's outcomes, shown to the model as they are; the third
    is the decorator's exception, which the SDK hides behind its "try again"."""
    with intentgate.Client(gateway.url, timeout=30) as client:
        tool = agents.function_tool(refund_tool(client, mock.url))

        def one_call(order_id: str) -> str:
            model = agents_testing.ScriptedModel(
                [
                    [agents_testing.function_call("refund_order", {"order_id": order_id, "amount": "9.00"}, call_id="call_1")],
                    [agents_testing.assistant_message("Done.")],
                ]
            )
            agent = agents.Agent(name="support", instructions=INSTRUCTIONS, tools=[tool], model=model)
            asyncio.run(agents.Runner.run(agent, f"Please refund 9.00 on order {order_id}."))
            output = tool_outputs(model.last_call)["call_1"]
            assert isinstance(output, str)
            return output

        mock.faults(reject=1000)
        rejected = shown(one_call("agents-declined"))
        # A timeout that committed, and a lookup that fails: unknown, and still unknown.
        mock.faults(timeout=1000, commit_when_ambiguous=1000, lookup_failure=1000)
        pending = shown(one_call("agents-unknown"))
        mock.faults()
        gateway.stop()
        unreachable = one_call("agents-unreachable")

    print(f"\nthe model reads:\n  rejected: {rejected}\n  pending_unknown: {pending}\n  gateway down: {unreachable!r}")
    assert rejected["status"] == "rejected", rejected
    assert "Your card was declined." in rejected["message"]
    assert pending["status"] == "pending_unknown", pending
    assert "Do not retry refund_order" in pending["message"]
    assert unreachable == TOOL_ERROR_MESSAGE
    assert mock.effects()["by_intent_key"] == {"refund_order:refund:agents-unknown:9.00": 1}


def test_what_the_model_reads_for_a_held_or_over_budget_refund(mock: Mock, policy_gateway: Gateway) -> None:
    """Refunds over 100 wait for a person, and an order gets one refund a day: the body
    runs for neither, and the model reads why."""
    with intentgate.Client(policy_gateway.url, timeout=30) as client:
        tool = agents.function_tool(refund_tool(client, mock.url))
        model = agents_testing.ScriptedModel(
            [
                [
                    agents_testing.function_call("refund_order", {"order_id": "agents-big", "amount": "150.00"}, call_id="call_big"),
                    agents_testing.function_call("refund_order", {"order_id": "agents-once", "amount": "5.00"}, call_id="call_first"),
                ],
                [agents_testing.function_call("refund_order", {"order_id": "agents-once", "amount": "6.00"}, call_id="call_second")],
                [agents_testing.assistant_message("Done.")],
            ]
        )
        agent = agents.Agent(name="support", instructions=INSTRUCTIONS, tools=[tool], model=model)
        asyncio.run(agents.Runner.run(agent, "Please refund 150.00 on agents-big, and 5.00 then 6.00 on agents-once."))

    outputs = tool_outputs(model.last_call)
    held, first, second = (shown(outputs[call_id]) for call_id in ("call_big", "call_first", "call_second"))
    print(f"\nthe model reads:\n  awaiting_approval: {held}\n  over_budget: {second}")
    assert held["status"] == "awaiting_approval", held
    assert first["status"] == "done", first
    assert second["status"] == "over_budget", second
    assert mock.effects()["by_intent_key"] == {"refund_order:refund:agents-once:5.00": 1}


def test_the_example_runs_as_its_docstring_says(mock: Mock, example_gateway: Gateway) -> None:
    printed = run_example("openai_agents_refund.py", ["8812", "49.00"], example_gateway, mock)
    prefix = "refund_order_sdk answered: "
    answers = [shown(line.removeprefix(prefix)) for line in printed.splitlines() if line.startswith(prefix)]
    assert [answer["status"] for answer in answers] == ["done", "already_done"], printed
    assert answers[0]["result"]["id"] == answers[1]["result"]["id"]
    assert mock.effects()["by_intent_key"] == {"refund_order_sdk:refund:8812:49.00": 1}


def test_the_calls_of_one_response_run_at_once() -> None:
    """Each of two calls waits for the other: run one after the other, the first would wait
    in vain (a `BrokenBarrierError`, which the SDK would show the model as an error)."""
    both = threading.Barrier(2, timeout=PROCESS_WAIT_SECONDS)

    def meet(caller: str) -> str:
        """Waits for the other caller."""
        both.wait()
        return f"{caller} met"

    model = agents_testing.ScriptedModel(
        [
            [agents_testing.function_call("meet", {"caller": name}, call_id=name) for name in ("first", "second")],
            [agents_testing.assistant_message("ok")],
        ]
    )
    agent = agents.Agent(name="support", instructions=INSTRUCTIONS, tools=[agents.function_tool(meet)], model=model)
    asyncio.run(agents.Runner.run(agent, "Meet."))
    assert tool_outputs(model.last_call) == {"first": "first met", "second": "second met"}


def test_an_intent_id_block_around_the_run_reaches_the_tool() -> None:
    """The SDK runs a `def` tool with `asyncio.to_thread`, which copies the caller's context:
    the application's intent id, entered around `Runner.run`, is the one the tool reads."""
    seen: list[str | None] = []

    def whose_intent(order_id: str) -> str:
        """Which request of the user this is."""
        seen.append(intentgate.current_intent_id())
        return json.dumps({"order_id": order_id})

    model = agents_testing.ScriptedModel(
        [[agents_testing.function_call("whose_intent", {"order_id": "agents-id"}, call_id="call_1")], [agents_testing.assistant_message("ok")]]
    )
    agent = agents.Agent(name="support", instructions=INSTRUCTIONS, tools=[agents.function_tool(whose_intent)], model=model)
    with intentgate.intent_id("request-42"):
        asyncio.run(agents.Runner.run(agent, "Whose request is this?"))
    assert seen == ["request-42"]
