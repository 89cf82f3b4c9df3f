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
