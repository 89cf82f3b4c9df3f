"""The application's intent id (`intentgate.intent_id`) against the scripted gateway
(`fake_gateway.py`): which requests carry the `Intent-Id` header, with which id, in which
threads and tasks. Written when a client-executed tool keyed by `{intent_id}` could not be
used through the decorator at all: the decorated function had no way to send the id, so
every call answered `missing_intent_id`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import threading
from decimal import Decimal
from typing import Any

import pytest

import intentgate
from fake_gateway import KEY, LEASE_TOKEN, FakeGateway, answer, execute, lease_lost, look_up

RECORD = {"id": "ch_000001", "object": "charge", "amount": "25.00"}
MISSING = answer(
    "invalid_arguments",
    reason=intentgate.MISSING_INTENT_ID,
    errors=["this tool's key uses {intent_id}: the calling application must pass an intent id"],
)


class ProviderTimeout(Exception):
    """The provider did not answer in time."""


@pytest.fixture
def gateway() -> FakeGateway:
    return FakeGateway()


@pytest.fixture
def client(gateway: FakeGateway) -> intentgate.Client:
    return intentgate.Client("http://gateway.test", transport=gateway.transport())


def charge_tool(client: intentgate.Client, keys: list[str], *script: Any) -> Any:
    """`charge_card(customer_id, amount)`: each run pops the next of `script` (a record to
    return or an exception to raise) and records its key in `keys`."""
    steps = list(script)

    @client.side_effect("charge_card", ambiguous=ProviderTimeout, lookup=lambda **_: RECORD, external_id="id")
    def charge_card(customer_id: str, amount: Decimal, *, idempotency_key: str) -> dict[str, Any]:
        """Charge the customer's card on file."""
        keys.append(idempotency_key)
        step = steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step  # type: ignore[no-any-return]

    return charge_card


def grant_ids(gateway: FakeGateway) -> list[str | None]:
    """The `Intent-Id` header of every grant, in order (None where there was none)."""
    return [headers.get("intent-id") for kind, _, _, headers in gateway.requests if kind == "grant"]


def test_a_call_inside_the_block_sends_its_intent_id(client: intentgate.Client, gateway: FakeGateway) -> None:
    keys: list[str] = []
    gateway.grants.append(execute())
    gateway.settles.append(answer("done", result=RECORD))
    charge_card = charge_tool(client, keys, RECORD)

    with intentgate.intent_id("ord-7781-charge") as current:
        assert current == "ord-7781-charge" == intentgate.current_intent_id()
        outcome = charge_card("cus_1042", Decimal("25.00"))

    assert outcome["status"] == "done"
    assert keys == [KEY]
    assert grant_ids(gateway) == ["ord-7781-charge"]
    # The id is a header, never an argument: the model is shown the business arguments only.
    assert gateway.sent("grant") == [{"arguments": {"customer_id": "cus_1042", "amount": "25.00"}}]
    assert list(inspect.signature(charge_card).parameters) == ["customer_id", "amount"]
    assert intentgate.current_intent_id() is None


def test_without_an_intent_id_the_gateways_answer_is_returned_and_nothing_runs(client: intentgate.Client, gateway: FakeGateway) -> None:
    keys: list[str] = []
    gateway.grants.extend([MISSING, MISSING])
    charge_card = charge_tool(client, keys)

    first = charge_card("cus_1042", Decimal("25.00"))
    again = charge_card("cus_1042", Decimal("25.00"))

    assert first == again == MISSING["outcome"]
    assert first["reason"] == intentgate.MISSING_INTENT_ID
    assert keys == [] and gateway.kinds() == ["grant", "grant"]
    assert grant_ids(gateway) == [None, None]


def test_every_grant_of_one_call_sends_the_same_id(client: intentgate.Client, gateway: FakeGateway) -> None:
    """The rounds of one call (unknown, then the lookup; a lost lease, then a grant again)
    are one request of the user: each grant carries the id."""
    keys: list[str] = []
    gateway.grants.extend([execute(), look_up(), execute()])
    gateway.settles.extend([answer("pending_unknown"), lease_lost(), answer("done", result=RECORD)])
    charge_card = charge_tool(client, keys, ProviderTimeout("no answer"), RECORD)

    with intentgate.intent_id("ord-7781-charge"):
        outcome = charge_card("cus_1042", "25.00")

    assert outcome["status"] == "done"
    assert gateway.kinds() == ["grant", "settle", "grant", "settle", "grant", "settle"]
    assert grant_ids(gateway) == ["ord-7781-charge"] * 3
    assert [settle["outcome"] for settle in gateway.sent("settle")] == ["unknown", "done", "done"]
    assert all(settle["lease"] == LEASE_TOKEN for settle in gateway.sent("settle"))


def test_blocks_nest_and_reset(client: intentgate.Client, gateway: FakeGateway) -> None:
    keys: list[str] = []
    gateway.grants.extend([answer("already_done", result=RECORD)] * 4)
    charge_card = charge_tool(client, keys)

    with intentgate.intent_id("request-1"):
        charge_card("cus_1042", "25.00")
        with intentgate.intent_id("request-2"):
            charge_card("cus_1042", "25.00")
        charge_card("cus_1042", "25.00")
    charge_card("cus_1042", "25.00")

    assert grant_ids(gateway) == ["request-1", "request-2", "request-1", None]


def test_a_block_left_by_an_exception_is_reset() -> None:
    with pytest.raises(RuntimeError), intentgate.intent_id("request-1"):
        raise RuntimeError("the request failed")
    assert intentgate.current_intent_id() is None


def test_threads_see_the_id_of_the_context_they_run_in(client: intentgate.Client, gateway: FakeGateway) -> None:
    """A framework that runs tools in a pool with the caller's context (`copy_context().run`,
    as LangChain's executor does) sends the request's id; a thread started without it sends
    none, so an id never leaks into work that was not started for its request."""
    keys: list[str] = []
    gateway.grants.extend([answer("already_done", result=RECORD)] * 3)
    charge_card = charge_tool(client, keys)
    seen: list[str | None] = []

    with intentgate.intent_id("request-1"):
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            pool.submit(contextvars.copy_context().run, charge_card, "cus_1042", "25.00").result()
        plain = threading.Thread(target=lambda: (seen.append(intentgate.current_intent_id()), charge_card("cus_1042", "25.00")))
        plain.start()
        plain.join()

    def own_request() -> None:
        with intentgate.intent_id("request-2"):
            charge_card("cus_1042", "25.00")

    own = threading.Thread(target=own_request)
    own.start()
    own.join()

    assert seen == [None]
    assert grant_ids(gateway) == ["request-1", None, "request-2"]


def test_call_and_grant_send_the_blocks_id_unless_given_one() -> None:
    gateway = FakeGateway()
    gateway.grants.extend([execute(), execute()])
    with intentgate.Client("http://gateway.test", transport=gateway.transport()) as client:
        with intentgate.intent_id("request-1"):
            client.grant("charge_card", {"customer_id": "cus_1042"})
            client.grant("charge_card", {"customer_id": "cus_1042"}, intent_id="explicit-7")
    assert grant_ids(gateway) == ["request-1", "explicit-7"]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (None, TypeError),
        (7781, TypeError),
        ("", ValueError),
        ("x" * (intentgate.INTENT_ID_LENGTH_MAX + 1), ValueError),
        (" ord-7781", ValueError),
        ("ord-7781\n", ValueError),
        ("commande-é", ValueError),
    ],
)
def test_an_id_the_gateway_cant_take_is_refused_before_anything_is_sent(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error), intentgate.intent_id(value):
        raise AssertionError("must not enter")
    assert intentgate.current_intent_id() is None


def test_the_longest_id_is_taken() -> None:
    longest = "x" * intentgate.INTENT_ID_LENGTH_MAX
    with intentgate.intent_id(longest):
        assert intentgate.current_intent_id() == longest


def test_async_tasks_keep_their_own_ids() -> None:
    """Concurrent tasks on one event loop, each serving its own request: each grant carries
    the id of the task that made it, and a task created inside a block inherits its id."""
    gateway = FakeGateway()
    gateway.grants.extend([execute(intent_id=1), execute(intent_id=2), execute(intent_id=3)])
    gateway.settles.extend([answer("done", result=RECORD)] * 3)
    ran: list[tuple[str | None, str]] = []

    async def main() -> list[dict[str, Any]]:
        async with intentgate.AsyncClient("http://gateway.test", transport=gateway.transport()) as client:

            @client.side_effect("charge_card", external_id="id")
            async def charge_card(customer_id: str, amount: Decimal, *, idempotency_key: str) -> dict[str, Any]:
                """Charge the customer's card on file."""
                await asyncio.sleep(0.05)
                ran.append((intentgate.current_intent_id(), customer_id))
                return RECORD

            async def serve(request: str, customer_id: str) -> dict[str, Any]:
                with intentgate.intent_id(request):
                    await asyncio.sleep(0)
                    return await charge_card(customer_id, "25.00")

            with intentgate.intent_id("request-3"):
                inherited = asyncio.create_task(charge_card("cus_3", "25.00"))
            return list(await asyncio.gather(serve("request-1", "cus_1"), serve("request-2", "cus_2"), inherited))

    outcomes = asyncio.run(main())

    assert [outcome["status"] for outcome in outcomes] == ["done"] * 3
    sent = {body["arguments"]["customer_id"]: headers.get("intent-id") for kind, _, body, headers in gateway.requests if kind == "grant"}
    assert sent == {"cus_1": "request-1", "cus_2": "request-2", "cus_3": "request-3"}
    assert sorted(ran) == [("request-1", "cus_1"), ("request-2", "cus_2"), ("request-3", "cus_3")]


def test_an_intent_id_is_no_decorator() -> None:
    """Regression: built with contextlib, `intent_id(...)` was also a decorator, so
    `@intent_id("x")` would have sent one id for every request a function ever served, making
    them all one intent. It is a context manager only."""
    with pytest.raises(TypeError):
        intentgate.intent_id("request-1")(lambda: None)  # type: ignore[operator]
    block = intentgate.intent_id("request-1")
    with block, pytest.raises(RuntimeError, match="one per request"):
        block.__enter__()
    assert intentgate.current_intent_id() is None
