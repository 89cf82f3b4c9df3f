"""The decorated function as a tool of Pydantic AI: `Agent(tools=[...])` and
`@agent.tool_plain` read its signature (no `idempotency_key` in the schema the model is
shown), and `Agent.run` runs it from a model's tool calls, against the live gateway. The
model is Pydantic AI's `FunctionModel` (pydantic_ai.models.function): no LLM, no network
beyond loopback.

What Pydantic AI does with the tool, as these tests show it: a `def` tool runs in a worker
thread (with the caller's context, so an `intentgate.intent_id` block around the run reaches
it); the tool calls of one model response run at once; the return value is shown to the
model as JSON (a `Decimal` as a string); only `ModelRetry` (and an argument that fails
validation) is sent back to the model as a retry prompt, up to the tool's `retries`; any
other exception ends the run and reaches the caller of `Agent.run`. The decorator raises
only when the gateway can't be reached or refuses the request itself."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import httpx
import pytest

import agent_storm
import intentgate
from agent_storm import AMOUNT, HTTP_RETRIES, ModelUnavailable, Script
from processes import PROCESS_WAIT_SECONDS, Gateway, Mock, refund_tool, run_example

pydantic_ai = pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is not installed (pip install -r tests/requirements.txt)")
messages = pytest.importorskip("pydantic_ai.messages", reason="pydantic-ai-slim is not installed")
function_model = pytest.importorskip("pydantic_ai.models.function", reason="pydantic-ai-slim is not installed")

#: No test here reaches past the loopback interface (a model's API, a trace exporter).
pytestmark = pytest.mark.usefixtures("loopback_only")

INSTRUCTIONS = "You are a support agent. Refund what the customer asks for with refund_order."


def tool_returns(request: Any) -> dict[str, dict[str, Any]]:
    """The tool answers in one request to the model, by call id, as the model reads them
    (`model_response_str`, the text a model's API is sent); a retry prompt fails the test."""
    answers = {}
    for part in request.parts:
        assert not isinstance(part, messages.RetryPromptPart), f"the model was asked to retry: {part}"
        if isinstance(part, messages.ToolReturnPart):
            answers[part.tool_call_id] = json.loads(part.model_response_str())
    return answers


def refund_call(order_id: str, amount: Any, call_id: str) -> Any:
    return messages.ToolCallPart("refund_order", {"order_id": order_id, "amount": amount}, tool_call_id=call_id)


def asker(tool: Any) -> agent_storm.Ask:
    """One run of an agent with `tool`, whose `FunctionModel` follows a `Script`."""

    async def ask(script: Script) -> None:
        turns = 0

        def model(history: list[Any], info: Any) -> Any:
            nonlocal turns
            for call_id, outcome in tool_returns(history[-1]).items():
                script.read(call_id, outcome)
            if turns < script.turns:
                ids = script.call_ids(turns)
                turns += 1
                return messages.ModelResponse(parts=[refund_call(script.order_id, AMOUNT, call_id) for call_id in ids])
            if script.fail_at_end:
                raise ModelUnavailable("the model's API answered 500")
            return messages.ModelResponse(parts=[messages.TextPart("Your refund is on its way.")])

        agent = pydantic_ai.Agent(function_model.FunctionModel(model), instructions=INSTRUCTIONS, tools=[tool])
        await agent.run(f"Please refund {AMOUNT} on order {script.order_id}.")

    return ask


def one_call(agent_tools: list[Any], order_id: str, amount: Any = "9.00") -> tuple[Any, dict[str, Any]]:
    """A run whose model calls `refund_order` once, then answers; the run's result and what
    the model read."""
    read: dict[str, dict[str, Any]] = {}

    def model(history: list[Any], info: Any) -> Any:
        if len(history) == 1:
            return messages.ModelResponse(parts=[refund_call(order_id, amount, "call_1")])
        read.update(tool_returns(history[-1]))
        return messages.ModelResponse(parts=[messages.TextPart("Done.")])

    agent = pydantic_ai.Agent(function_model.FunctionModel(model), instructions=INSTRUCTIONS, tools=agent_tools)
    result = agent.run_sync(f"Please refund on order {order_id}.")
    return result, read["call_1"]


def test_the_tool_shows_the_business_arguments_only(mock: Mock, gateway: Gateway) -> None:
    shown: list[Any] = []

    def model(history: list[Any], info: Any) -> Any:
        shown.extend(info.function_tools)
        return messages.ModelResponse(parts=[messages.TextPart("Nothing to do.")])

    with intentgate.Client(gateway.url, timeout=30) as client:
        refund_order = refund_tool(client, mock.url)
        agent = pydantic_ai.Agent(function_model.FunctionModel(model), instructions=INSTRUCTIONS)
        # The decorator form: the decorated function registered as a plain tool.
        agent.tool_plain(refund_order)
        agent.run_sync("Hello")

    (tool,) = shown
    assert tool.name == "refund_order"
    assert tool.description.startswith("Refund part or all of an order.")
    schema = tool.parameters_json_schema
    assert set(schema["properties"]) == {"order_id", "amount"}
    assert schema["required"] == ["order_id", "amount"]
    assert {"type": "number"} in schema["properties"]["amount"]["anyOf"], schema


def test_the_agent_runs_the_decorated_function_once_per_intent(mock: Mock, gateway: Gateway) -> None:
    with intentgate.Client(gateway.url, timeout=30) as client:
        tools = [refund_tool(client, mock.url)]
        # The model writes the amount as a number, then (a new run) as a string.
        result, first = one_call(tools, "pydantic-1", 7.5)
        _, second = one_call(tools, "pydantic-1", "7.50")

    assert result.output == "Done."
    assert first["status"] == "done", first
    assert second["status"] == "already_done", second
    assert first["result"]["id"] == second["result"]["id"]
    assert mock.effects()["by_intent_key"] == {"refund_order:refund:pydantic-1:7.50": 1}


@pytest.mark.parametrize("storm", list(agent_storm.STORMS))
def test_the_retry_storm_through_the_agent_makes_one_refund_per_intent(mock: Mock, gateway: Gateway, storm: str) -> None:
    with intentgate.Client(gateway.url, timeout=30) as client:
        tool = refund_tool(client, mock.url, http_retries=HTTP_RETRIES)
        agent_storm.run_and_check("pydantic-ai", storm, asker(tool), mock)


def test_what_the_model_reads_for_outcomes_that_are_not_done(mock: Mock, gateway: Gateway) -> None:
    """A refused refund and one whose outcome is unknown are the decorator's outcomes, shown
    to the model as they are; a gateway that can't be reached is the decorator's exception,
    which ends the run."""
    with intentgate.Client(gateway.url, timeout=30) as client:
        tools = [refund_tool(client, mock.url)]
        mock.faults(reject=1000)
        _, rejected = one_call(tools, "pydantic-declined")
        # A timeout that committed, and a lookup that fails: unknown, and still unknown.
        mock.faults(timeout=1000, commit_when_ambiguous=1000, lookup_failure=1000)
        _, pending = one_call(tools, "pydantic-unknown")
        mock.faults()
        gateway.stop()
        with pytest.raises(httpx.TransportError) as unreachable:
            one_call(tools, "pydantic-unreachable")

    print(f"\nthe model reads:\n  rejected: {json.dumps(rejected)}\n  pending_unknown: {json.dumps(pending)}\n  gateway down: the run raises {unreachable.value!r}")
    assert rejected["status"] == "rejected", rejected
    assert "Your card was declined." in rejected["message"]
    assert pending["status"] == "pending_unknown", pending
    assert "Do not retry refund_order" in pending["message"]
    assert mock.effects()["by_intent_key"] == {"refund_order:refund:pydantic-unknown:9.00": 1}


def test_what_the_model_reads_for_a_held_or_over_budget_refund(mock: Mock, policy_gateway: Gateway) -> None:
    """Refunds over 100 wait for a person, and an order gets one refund a day: the body
    runs for neither, and the model reads why."""
    with intentgate.Client(policy_gateway.url, timeout=30) as client:
        tools = [refund_tool(client, mock.url)]
        _, held = one_call(tools, "pydantic-big", "150.00")
        _, first = one_call(tools, "pydantic-once", "5.00")
        _, second = one_call(tools, "pydantic-once", "6.00")

    print(f"\nthe model reads:\n  awaiting_approval: {json.dumps(held)}\n  over_budget: {json.dumps(second)}")
    assert held["status"] == "awaiting_approval", held
    assert first["status"] == "done", first
    assert second["status"] == "over_budget", second
    assert mock.effects()["by_intent_key"] == {"refund_order:refund:pydantic-once:5.00": 1}


def test_the_example_runs_as_its_docstring_says(mock: Mock, example_gateway: Gateway) -> None:
    printed = run_example("pydantic_ai_refund.py", ["8812", "49.00"], example_gateway, mock)
    prefix = "refund_order_sdk answered: "
    answers = [json.loads(line.removeprefix(prefix)) for line in printed.splitlines() if line.startswith(prefix)]
    assert [answer["status"] for answer in answers] == ["done", "already_done"], printed
    assert answers[0]["result"]["id"] == answers[1]["result"]["id"]
    assert mock.effects()["by_intent_key"] == {"refund_order_sdk:refund:8812:49.00": 1}


def test_the_calls_of_one_response_run_at_once() -> None:
    """Each of two calls waits for the other: run one after the other, the first would wait
    in vain (a `BrokenBarrierError`, which would end the run)."""
    both = threading.Barrier(2, timeout=PROCESS_WAIT_SECONDS)
    read: dict[str, Any] = {}

    def meet(caller: str) -> str:
        """Waits for the other caller."""
        both.wait()
        return f"{caller} met"

    def model(history: list[Any], info: Any) -> Any:
        if len(history) == 1:
            return messages.ModelResponse(parts=[messages.ToolCallPart("meet", {"caller": name}, tool_call_id=name) for name in ("first", "second")])
        read.update({part.tool_call_id: part.content for part in history[-1].parts})
        return messages.ModelResponse(parts=[messages.TextPart("ok")])

    pydantic_ai.Agent(function_model.FunctionModel(model), tools=[meet]).run_sync("Meet.")
    assert read == {"first": "first met", "second": "second met"}


def test_an_intent_id_block_around_the_run_reaches_the_tool() -> None:
    """Pydantic AI runs a `def` tool in a worker thread with the caller's context: the
    application's intent id, entered around `Agent.run`, is the one the tool reads."""
    seen: list[str | None] = []

    def whose_intent(order_id: str) -> str:
        """Which request of the user this is."""
        seen.append(intentgate.current_intent_id())
        return order_id

    def model(history: list[Any], info: Any) -> Any:
        if len(history) == 1:
            return messages.ModelResponse(parts=[messages.ToolCallPart("whose_intent", {"order_id": "pydantic-id"}, tool_call_id="call_1")])
        return messages.ModelResponse(parts=[messages.TextPart("ok")])

    agent = pydantic_ai.Agent(function_model.FunctionModel(model), tools=[whose_intent])
    with intentgate.intent_id("request-42"):
        asyncio.run(agent.run("Whose request is this?"))
    assert seen == ["request-42"]
