"""A client-executed tool keyed by the application's intent id, through the decorator,
against the real gateway and the mock provider: `charge_card`, whose key is
`charge:{customer_id}:{intent_id}`, since a customer may be charged the same amount twice on
purpose: one request of the user is one charge, and the same request with another amount is
a `conflict`, not a second charge. The application serves each request of the user inside
`intentgate.intent_id(...)`; the model only ever sees the customer and the amount.

Written when such a tool could not be used through the decorator at all: the decorated
function had no way to send the id, so every call answered `missing_intent_id`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import json
import pathlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

import intentgate
from processes import CONFIG, LEASE_MS, PROCESS_WAIT_SECONDS, Gateway, Mock, refund_tool

#: The tests' config plus a client-executed charge keyed by the application's intent id.
CHARGE_CONFIG = CONFIG + f"""\
  - name: charge_card
    description: Charge the customer's card on file. Tell the customer the amount and get their agreement first.
    effect: side_effect
    executor: client
    key: "charge:{{customer_id}}:{{intent_id}}"
    timeout_ms: {LEASE_MS}
    key_window_hours: 24
    input_schema:
      type: object
      required: [customer_id, amount]
      properties:
        customer_id: {{type: string, minLength: 1, maxLength: 64}}
        amount: {{type: string, pattern: "^[0-9]+(\\\\.[0-9]{{1,2}})?$"}}
      additionalProperties: false
"""

#: How many calls of one request a storm makes, and from how many threads or tasks.
STORM_CALLS = 18
STORM_WORKERS = 6
#: How long the body holds the charge open, so the storm's calls overlap it.
BODY_SECONDS = 0.3


@pytest.fixture
def charge_gateway(tmp_path: pathlib.Path, mock: Mock) -> Iterator[Gateway]:
    folder = tmp_path / "charges"
    folder.mkdir()
    config = folder / "gateway.yaml"
    config.write_text(CHARGE_CONFIG)
    gateway = Gateway(folder, config=config)
    yield gateway
    gateway.stop()


class Runs:
    """The body's runs: the key and intent id of each, counted across threads."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self._lock = threading.Lock()

    def add(self, key: str) -> None:
        with self._lock:
            self.keys.append(key)


def charge_tool(client: intentgate.Client, provider: httpx.Client, runs: Runs) -> Any:
    @client.side_effect("charge_card", external_id="id")
    def charge_card(customer_id: str, amount: Decimal, *, idempotency_key: str) -> dict[str, Any]:
        """Charge the customer's card on file."""
        runs.add(idempotency_key)
        time.sleep(BODY_SECONDS)
        response = provider.post(
            "/v1/charges",
            json={"customer_id": customer_id, "amount": str(amount), "currency": "usd", "metadata": {"intent_key": idempotency_key}},
            headers={"Idempotency-Key": idempotency_key},
        )
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    return charge_card


def storm(function: Any, calls: int, *args: Any) -> list[dict[str, Any]]:
    """`function(*args)` `calls` times from `STORM_WORKERS` threads, each in a copy of the
    caller's context (as an agent framework's executor runs a tool)."""
    with concurrent.futures.ThreadPoolExecutor(STORM_WORKERS) as pool:
        futures = [pool.submit(contextvars.copy_context().run, function, *args) for _ in range(calls)]
        return [future.result() for future in futures]


def charges(mock: Mock) -> dict[str, int]:
    """The provider's effects by intent key, charges only."""
    return {key: count for key, count in mock.effects()["by_intent_key"].items() if key.startswith("charge_card:")}


def test_a_retry_storm_of_one_request_charges_once(mock: Mock, charge_gateway: Gateway) -> None:
    runs = Runs()
    with intentgate.Client(charge_gateway.url, timeout=30) as client, httpx.Client(base_url=mock.url, timeout=PROCESS_WAIT_SECONDS) as provider:
        assert {tool["name"]: tool for tool in client.tools()}["charge_card"]["needs_intent_id"] is True
        charge_card = charge_tool(client, provider, runs)
        with intentgate.intent_id("ord-7781-charge"):
            outcomes = storm(charge_card, STORM_CALLS, "cus_1042", Decimal("25.00"))
            # The same request retried later (the user pressed the button again).
            later = charge_card("cus_1042", "25.00")

    statuses = [outcome["status"] for outcome in outcomes]
    print(f"\nstorm of {STORM_CALLS} calls under one intent id: {dict(Counter(statuses))}; body runs {len(runs.keys)}")
    assert statuses.count("done") == 1, statuses
    assert statuses.count("already_done") == STORM_CALLS - 1, statuses
    assert later["status"] == "already_done", later
    assert len({outcome["result"]["id"] for outcome in [*outcomes, later]}) == 1
    assert runs.keys == ["charge_card:charge:cus_1042:ord-7781-charge"]
    assert charges(mock) == {"charge_card:charge:cus_1042:ord-7781-charge": 1}


def test_two_requests_with_the_same_arguments_charge_twice(mock: Mock, charge_gateway: Gateway) -> None:
    runs = Runs()
    with intentgate.Client(charge_gateway.url, timeout=30) as client, httpx.Client(base_url=mock.url, timeout=PROCESS_WAIT_SECONDS) as provider:
        charge_card = charge_tool(client, provider, runs)
        answers: dict[str, list[dict[str, Any]]] = {}
        for request in ("ord-7781-charge", "ord-7790-charge"):
            with intentgate.intent_id(request):
                answers[request] = storm(charge_card, 4, "cus_1042", "25.00")
        # The first request's id with another amount: the same intent with other arguments,
        # so nothing runs (the amount is not part of the key, on purpose).
        with intentgate.intent_id("ord-7781-charge"):
            conflict = charge_card("cus_1042", "30.00")
        # A tool keyed by its arguments is one intent whatever id is around the call.
        refund_order = refund_tool(client, mock.url)
        refunds = []
        for request in ("ord-7781-charge", "ord-7790-charge"):
            with intentgate.intent_id(request):
                refunds.append(refund_order("8812", "49.00"))

    first, second = answers["ord-7781-charge"], answers["ord-7790-charge"]
    assert sorted(outcome["status"] for outcome in first) == ["already_done"] * 3 + ["done"]
    assert sorted(outcome["status"] for outcome in second) == ["already_done"] * 3 + ["done"]
    assert first[0]["result"]["id"] != second[0]["result"]["id"]
    assert sorted(runs.keys) == [
        "charge_card:charge:cus_1042:ord-7781-charge",
        "charge_card:charge:cus_1042:ord-7790-charge",
    ]
    assert conflict["status"] == "conflict", conflict
    assert charges(mock) == {
        "charge_card:charge:cus_1042:ord-7781-charge": 1,
        "charge_card:charge:cus_1042:ord-7790-charge": 1,
    }
    assert [refund["status"] for refund in refunds] == ["done", "already_done"]
    assert mock.effects()["total"] == 3


def test_without_an_intent_id_nothing_runs_and_the_model_is_told(mock: Mock, charge_gateway: Gateway) -> None:
    runs = Runs()
    with intentgate.Client(charge_gateway.url, timeout=30) as client, httpx.Client(base_url=mock.url, timeout=PROCESS_WAIT_SECONDS) as provider:
        charge_card = charge_tool(client, provider, runs)
        outcomes = storm(charge_card, 6, "cus_1042", "25.00")
        # An id set for one request is gone once it is served.
        with intentgate.intent_id("ord-7781-charge"):
            served = charge_card("cus_1042", "25.00")
        after = charge_card("cus_1042", "25.00")

    first = outcomes[0]
    assert first["status"] == "invalid_arguments", first
    assert first["reason"] == intentgate.MISSING_INTENT_ID
    assert "Do not retry charge_card" in first["message"]
    assert all(outcome == first for outcome in [*outcomes, after])
    assert served["status"] == "done", served
    assert runs.keys == ["charge_card:charge:cus_1042:ord-7781-charge"]
    assert mock.effects()["total"] == 1


def test_async_requests_each_charge_once(mock: Mock, charge_gateway: Gateway) -> None:
    """Two requests served concurrently on one event loop, each a storm of tasks, and one
    task serving no request."""
    runs = Runs()

    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
        async with intentgate.AsyncClient(charge_gateway.url, timeout=30) as client, httpx.AsyncClient(base_url=mock.url, timeout=PROCESS_WAIT_SECONDS) as provider:

            @client.side_effect("charge_card", external_id="id")
            async def charge_card(customer_id: str, amount: Decimal, *, idempotency_key: str) -> dict[str, Any]:
                """Charge the customer's card on file."""
                runs.add(idempotency_key)
                await asyncio.sleep(BODY_SECONDS)
                response = await provider.post(
                    "/v1/charges",
                    json={"customer_id": customer_id, "amount": str(amount), "currency": "usd", "metadata": {"intent_key": idempotency_key}},
                    headers={"Idempotency-Key": idempotency_key},
                )
                response.raise_for_status()
                return response.json()  # type: ignore[no-any-return]

            async def serve(request: str) -> list[dict[str, Any]]:
                with intentgate.intent_id(request):
                    return list(await asyncio.gather(*(charge_card("cus_1042", "25.00") for _ in range(STORM_WORKERS))))

            first, second, unserved = await asyncio.gather(
                serve("ord-7781-charge"), serve("ord-7790-charge"), charge_card("cus_1042", "25.00")
            )
            return first, second, unserved

    first, second, unserved = asyncio.run(main())

    for outcomes in (first, second):
        assert sorted(outcome["status"] for outcome in outcomes) == ["already_done"] * (STORM_WORKERS - 1) + ["done"]
        assert len({outcome["result"]["id"] for outcome in outcomes}) == 1
    assert first[0]["result"]["id"] != second[0]["result"]["id"]
    assert unserved["reason"] == intentgate.MISSING_INTENT_ID, unserved
    assert sorted(runs.keys) == [
        "charge_card:charge:cus_1042:ord-7781-charge",
        "charge_card:charge:cus_1042:ord-7790-charge",
    ]
    assert charges(mock) == {
        "charge_card:charge:cus_1042:ord-7781-charge": 1,
        "charge_card:charge:cus_1042:ord-7790-charge": 1,
    }


def test_a_langgraph_tool_node_sends_the_id_of_the_request_it_serves(mock: Mock, charge_gateway: Gateway) -> None:
    """The application serves each request inside the block around `graph.invoke`; the
    ToolNode runs the model's tool calls in its executor's threads, which copy the context,
    so every call of a request carries that request's id. The model is shown the customer
    and the amount only."""
    langchain_tools = pytest.importorskip("langchain_core.tools", reason="langchain-core is not installed")
    langchain_messages = pytest.importorskip("langchain_core.messages", reason="langchain-core is not installed")
    langgraph_prebuilt = pytest.importorskip("langgraph.prebuilt", reason="langgraph is not installed")
    langgraph_graph = pytest.importorskip("langgraph.graph", reason="langgraph is not installed")

    def model_message(*call_ids: str) -> Any:
        """The model asking for the same charge once per call id (in parallel)."""
        calls = [
            {"name": "charge_card", "args": {"customer_id": "cus_1042", "amount": "25.00"}, "id": call_id, "type": "tool_call"}
            for call_id in call_ids
        ]
        return langchain_messages.AIMessage(content="", tool_calls=calls)

    runs = Runs()
    with intentgate.Client(charge_gateway.url, timeout=30) as client, httpx.Client(base_url=mock.url, timeout=PROCESS_WAIT_SECONDS) as provider:
        tool = langchain_tools.tool(charge_tool(client, provider, runs))
        assert set(tool.tool_call_schema.model_json_schema()["properties"]) == {"customer_id", "amount"}
        builder = langgraph_graph.StateGraph(langgraph_graph.MessagesState)
        builder.add_node("tools", langgraph_prebuilt.ToolNode([tool]))
        builder.add_edge(langgraph_graph.START, "tools")
        builder.add_edge("tools", langgraph_graph.END)
        graph = builder.compile()

        answers: dict[str, list[dict[str, Any]]] = {}
        for request, attempts in (("ord-7781-charge", (("a1", "a2", "a3"), ("a4",))), ("ord-7790-charge", (("b1",),))):
            with intentgate.intent_id(request):
                for call_ids in attempts:
                    state = graph.invoke({"messages": [model_message(*call_ids)]})
                    answers.setdefault(request, []).extend(
                        json.loads(message.content) for message in state["messages"] if isinstance(message, langchain_messages.ToolMessage)
                    )
        unserved = graph.invoke({"messages": [model_message("c1")]})["messages"][-1]

    assert sorted(answer["status"] for answer in answers["ord-7781-charge"]) == ["already_done"] * 3 + ["done"]
    assert [answer["status"] for answer in answers["ord-7790-charge"]] == ["done"]
    assert json.loads(unserved.content)["reason"] == intentgate.MISSING_INTENT_ID
    assert sorted(runs.keys) == ["charge_card:charge:cus_1042:ord-7781-charge", "charge_card:charge:cus_1042:ord-7790-charge"]
    assert charges(mock) == {"charge_card:charge:cus_1042:ord-7781-charge": 1, "charge_card:charge:cus_1042:ord-7790-charge": 1}
