"""The decorated function as an agent framework sees it: LangChain's `tool` reads its
signature (no `idempotency_key` in the schema the model is shown), and LangGraph's
`ToolNode` runs it from a model's tool call against the live gateway."""

from __future__ import annotations

import json

import pytest

import intentgate
from processes import Gateway, Mock, refund_tool

langchain_tools = pytest.importorskip(
    "langchain_core.tools", reason="langchain-core is not installed (pip install -r tests/requirements.txt)"
)
langchain_messages = pytest.importorskip("langchain_core.messages", reason="langchain-core is not installed")
langgraph_prebuilt = pytest.importorskip(
    "langgraph.prebuilt", reason="langgraph is not installed (pip install -r tests/requirements.txt)"
)
langgraph_graph = pytest.importorskip("langgraph.graph", reason="langgraph is not installed")


def tool_call(call_id: str, order_id: str, amount: str) -> object:
    """A model's message asking for one refund."""
    return langchain_messages.AIMessage(
        content="",
        tool_calls=[{"name": "refund_order", "args": {"order_id": order_id, "amount": amount}, "id": call_id, "type": "tool_call"}],
    )


def test_tool_node_runs_the_decorated_function_once_per_intent(mock: Mock, gateway: Gateway) -> None:
    with intentgate.Client(gateway.url, timeout=30) as client:
        tool = langchain_tools.tool(refund_tool(client, mock.url))

        schema = tool.tool_call_schema.model_json_schema()
        assert tool.name == "refund_order"
        assert tool.description.startswith("Refund part or all of an order.")
        assert set(schema["properties"]) == {"order_id", "amount"}
        assert schema["required"] == ["order_id", "amount"]

        # A graph of one node, the ToolNode, run on the model's message (a ToolNode reads
        # its runtime from the graph it is in).
        builder = langgraph_graph.StateGraph(langgraph_graph.MessagesState)
        builder.add_node("tools", langgraph_prebuilt.ToolNode([tool]))
        builder.add_edge(langgraph_graph.START, "tools")
        builder.add_edge("tools", langgraph_graph.END)
        graph = builder.compile()
        answers = []
        # The model calls it, then (a retry with a new tool call id) calls it again.
        for call_id in ("call_1", "call_2"):
            state = graph.invoke({"messages": [tool_call(call_id, "graph-1", "7.50")]})
            message = state["messages"][-1]
            assert message.tool_call_id == call_id
            answers.append(json.loads(message.content))

    first, second = answers
    assert first["status"] == "done", first
    assert second["status"] == "already_done", second
    assert first["result"]["id"] == second["result"]["id"]
    assert mock.effects()["by_intent_key"] == {"refund_order:refund:graph-1:7.50": 1}


def test_a_retry_policy_that_reruns_the_node_lands_on_the_same_refund(mock: Mock, gateway: Gateway) -> None:
    """LangGraph's `RetryPolicy` re-runs a node that raised, tool calls included. Here the
    node fails after the refund went through (as a step does when what follows the tool
    breaks), twice: each re-run calls the tool again and is told `already_done`, and the
    provider holds one refund."""
    langgraph_types = pytest.importorskip("langgraph.types", reason="langgraph is not installed")

    class StepFailed(Exception):
        """What broke after the tool ran."""

    outcomes: list[dict[str, object]] = []
    with intentgate.Client(gateway.url, timeout=30) as client:
        refund_order = refund_tool(client, mock.url)

        def refund_step(state: dict[str, object]) -> dict[str, object]:
            outcomes.append(refund_order("graph-retry", "3.25"))
            if len(outcomes) < 3:
                raise StepFailed(f"the step failed after the tool ran (run {len(outcomes)})")
            return {"messages": [langchain_messages.AIMessage(content=json.dumps(outcomes[-1], default=str))]}

        builder = langgraph_graph.StateGraph(langgraph_graph.MessagesState)
        builder.add_node(
            "refund",
            refund_step,
            retry_policy=langgraph_types.RetryPolicy(max_attempts=3, initial_interval=0.01, jitter=False, retry_on=StepFailed),
        )
        builder.add_edge(langgraph_graph.START, "refund")
        builder.add_edge("refund", langgraph_graph.END)
        builder.compile().invoke({"messages": []})

    assert [outcome["status"] for outcome in outcomes] == ["done", "already_done", "already_done"], outcomes
    assert len({json.dumps(outcome["result"], sort_keys=True, default=str) for outcome in outcomes}) == 1
    assert mock.effects()["by_intent_key"] == {"refund_order:refund:graph-retry:3.25": 1}


def test_an_amount_the_model_writes_two_ways_is_one_refund(mock: Mock, gateway: Gateway) -> None:
    # LangGraph shows a `Decimal` parameter to the model as `number | string`. The model
    # wrote 20.0, then "20.00", and the second call was a `conflict` for a refund that was
    # already done.
    with intentgate.Client(gateway.url, timeout=30) as client:
        tool = langchain_tools.tool(refund_tool(client, mock.url))
        schema = tool.tool_call_schema.model_json_schema()
        assert {"type": "number"} in schema["properties"]["amount"]["anyOf"], schema
        builder = langgraph_graph.StateGraph(langgraph_graph.MessagesState)
        builder.add_node("tools", langgraph_prebuilt.ToolNode([tool]))
        builder.add_edge(langgraph_graph.START, "tools")
        builder.add_edge("tools", langgraph_graph.END)
        graph = builder.compile()
        answers = []
        for call_id, amount in (("call_1", 20.0), ("call_2", "20.00")):
            message = langchain_messages.AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": "refund_order",
                        "args": {"order_id": "graph-amount", "amount": amount},
                        "id": call_id,
                        "type": "tool_call",
                    }
                ],
            )
            state = graph.invoke({"messages": [message]})
            answers.append(json.loads(state["messages"][-1].content))

    first, second = answers
    assert first["status"] == "done", first
    assert second["status"] == "already_done", second
    assert mock.effects()["by_intent_key"] == {"refund_order:refund:graph-amount:20.00": 1}
