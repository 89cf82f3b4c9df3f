"""The `side_effect` decorator's every branch, against a scripted gateway
(`fake_gateway.py`): what it sends, what it runs, and what it returns."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from decimal import Decimal
from typing import Any

import httpx
import pytest

import intentgate
import intentgate._client
from fake_gateway import KEY, LEASE_TOKEN, FakeGateway, answer, execute, lease_lost, look_up, problem


class Declined(Exception):
    """The provider refused (a card error)."""


class RateLimited(Exception):
    """The provider answered 429: nothing was processed."""


class ProviderTimeout(Exception):
    """The provider did not answer in time."""


@pytest.fixture
def gateway() -> FakeGateway:
    return FakeGateway()


@pytest.fixture
def client(gateway: FakeGateway) -> intentgate.Client:
    return intentgate.Client("http://gateway.test", "key-1", transport=gateway.transport())


class Provider:
    """The body's provider: each call pops the next scripted behaviour (a value to return
    or an exception to raise) and records the key it was sent."""

    def __init__(self, *script: Any) -> None:
        self.script = list(script)
        self.keys: list[str] = []
        self.lookups: list[dict[str, Any]] = []
        self.found: Any = None

    def refund(self, order_id: str, amount: Decimal, idempotency_key: str) -> Any:
        self.keys.append(idempotency_key)
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    def find(self, idempotency_key: str, **arguments: Any) -> Any:
        self.lookups.append({**arguments, "idempotency_key": idempotency_key})
        if isinstance(self.found, BaseException):
            raise self.found
        return self.found


RECORD = {"id": "re_000001", "object": "refund", "amount": "5.00"}


def decorated(client: intentgate.Client, provider: Provider, **options: Any) -> Any:
    options.setdefault("ambiguous", ProviderTimeout)
    options.setdefault("not_processed", RateLimited)
    options.setdefault("rejected", Declined)
    options.setdefault("lookup", provider.find)
    options.setdefault("external_id", "id")

    @client.side_effect("refund_order", **options)
    def refund_order(order_id: str, amount: Decimal, reason: str = "requested_by_customer", *, idempotency_key: str) -> dict[str, Any]:
        """Refund part or all of an order."""
        return provider.refund(order_id, amount, idempotency_key)  # type: ignore[no-any-return]

    return refund_order


def test_execute_runs_the_body_with_the_grants_key_and_settles_done(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider(RECORD)
    gateway.grants.append(execute())
    gateway.settles.append(answer("done", result=RECORD))

    outcome = decorated(client, provider)("o-1", Decimal("5.00"))

    assert outcome["status"] == "done" and outcome["result"] == RECORD
    assert provider.keys == [KEY]
    (grant,) = gateway.sent("grant")
    assert grant == {"arguments": {"order_id": "o-1", "amount": "5.00", "reason": "requested_by_customer"}}
    (settle,) = gateway.sent("settle")
    assert settle == {"lease": LEASE_TOKEN, "outcome": "done", "result": RECORD, "external_id": "re_000001"}
    request = gateway.requests[0]
    assert request[1] == "/v1/tools/refund_order/intents"
    assert request[3]["authorization"] == "Bearer key-1"
    assert request[3]["content-type"] == "application/json"


def test_an_answer_is_returned_without_running_the_body(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider()
    gateway.grants.append(answer("already_done", result=RECORD))

    outcome = decorated(client, provider)(order_id="o-1", amount="5.00")

    assert outcome["status"] == "already_done"
    assert provider.keys == [] and gateway.kinds() == ["grant"]


def test_a_rejection_settles_rejected_with_its_text(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider(Declined("card declined"))
    gateway.grants.append(execute())
    gateway.settles.append(answer("rejected"))

    assert decorated(client, provider)("o-1", "5.00")["status"] == "rejected"
    assert gateway.sent("settle") == [{"lease": LEASE_TOKEN, "outcome": "rejected", "reason": "card declined"}]
    assert gateway.kinds() == ["grant", "settle"]


def test_not_processed_settles_not_executed(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider(RateLimited("429 rate limited"))
    gateway.grants.append(execute())
    gateway.settles.append(answer("not_executed"))

    assert decorated(client, provider)("o-1", "5.00")["status"] == "not_executed"
    assert gateway.sent("settle") == [{"lease": LEASE_TOKEN, "outcome": "not_executed", "reason": "429 rate limited"}]


def test_ambiguous_settles_unknown_then_looks_up_and_finds(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider(ProviderTimeout("timed out after 10 s"))
    provider.found = RECORD
    gateway.grants.extend([execute(), look_up()])
    gateway.settles.extend([answer("pending_unknown"), answer("done", result=RECORD)])

    outcome = decorated(client, provider)("o-1", "5.00")

    assert outcome["status"] == "done"
    assert gateway.kinds() == ["grant", "settle", "grant", "settle"]
    unknown, done = gateway.sent("settle")
    assert unknown == {"lease": LEASE_TOKEN, "outcome": "unknown", "reason": "timed out after 10 s"}
    assert done == {"lease": LEASE_TOKEN, "outcome": "done", "result": RECORD, "external_id": "re_000001"}
    # The lookup gets the function's arguments, defaults applied, and the key it asked for.
    assert provider.lookups == [{"order_id": "o-1", "amount": "5.00", "reason": "requested_by_customer", "idempotency_key": KEY}]
    assert provider.keys == [KEY]


def test_not_found_then_a_resend_grant_runs_the_body_again_with_the_same_key(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider(ProviderTimeout(), RECORD)
    provider.found = None
    gateway.grants.extend([execute(), look_up()])
    gateway.settles.extend([answer("pending_unknown"), execute(resend=True, attempt=2), answer("done", result=RECORD)])

    outcome = decorated(client, provider)("o-1", "5.00")

    assert outcome["status"] == "done"
    assert provider.keys == [KEY, KEY]
    assert [s["outcome"] for s in gateway.sent("settle")] == ["unknown", "not_found", "done"]
    # An exception with no text is reported by its type's name.
    assert gateway.sent("settle")[0]["reason"] == "ProviderTimeout"


def test_an_exception_it_was_not_told_about_is_unknown_never_failed(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider(ConnectionResetError("connection reset by peer"))
    gateway.grants.extend([execute(), answer("pending_unknown")])
    gateway.settles.append(answer("pending_unknown"))

    outcome = decorated(client, provider)("o-1", "5.00")

    assert outcome["status"] == "pending_unknown"
    assert gateway.sent("settle") == [{"lease": LEASE_TOKEN, "outcome": "unknown", "reason": "connection reset by peer"}]


def test_ambiguous_wins_over_a_refusal_listed_for_the_same_exception(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider(ProviderTimeout("read timeout"))
    gateway.grants.extend([execute(), answer("pending_unknown")])
    gateway.settles.append(answer("pending_unknown"))

    decorated(client, provider, rejected=Exception, not_processed=Exception)("o-1", "5.00")

    assert gateway.sent("settle")[0]["outcome"] == "unknown"


def test_a_failed_lookup_settles_unknown(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider()
    provider.found = httpx.ConnectError("lookup refused")
    gateway.grants.append(look_up())
    gateway.settles.append(answer("pending_unknown"))

    outcome = decorated(client, provider)("o-1", "5.00")

    assert outcome["status"] == "pending_unknown"
    assert gateway.sent("settle") == [{"lease": LEASE_TOKEN, "outcome": "unknown", "reason": "lookup failed: lookup refused"}]
    assert provider.keys == []


def test_without_a_lookup_a_look_up_grant_settles_unknown(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider()
    gateway.grants.append(look_up())
    gateway.settles.append(answer("pending_unknown"))

    decorated(client, provider, lookup=None)("o-1", "5.00")

    ((settle),) = gateway.sent("settle")
    assert settle["outcome"] == "unknown" and provider.keys == []


def test_a_lookup_without_the_key_parameter_gets_only_the_arguments(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider()
    provider.found = RECORD
    gateway.grants.append(look_up())
    gateway.settles.append(answer("done"))

    def find(order_id: str, amount: Decimal, reason: str) -> dict[str, Any]:
        provider.lookups.append({"order_id": order_id})
        return RECORD

    decorated(client, provider, lookup=find)("o-1", "5.00")

    assert provider.lookups == [{"order_id": "o-1"}]


def test_lease_lost_on_settle_asks_again_and_returns_that_answer(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider(RECORD)
    gateway.grants.extend([execute(), answer("already_done", result=RECORD)])
    gateway.settles.append(lease_lost())

    outcome = decorated(client, provider)("o-1", "5.00")

    assert outcome["status"] == "already_done"
    assert provider.keys == [KEY]
    assert gateway.kinds() == ["grant", "settle", "grant"]


def test_lease_lost_then_a_look_up_grant_looks_up_instead_of_running_again(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider(RECORD)
    provider.found = RECORD
    gateway.grants.extend([execute(), look_up(intent_id=42)])
    gateway.settles.extend([lease_lost(), answer("done", result=RECORD)])

    assert decorated(client, provider)("o-1", "5.00")["status"] == "done"
    assert provider.keys == [KEY] and len(provider.lookups) == 1


def test_a_settle_that_could_not_be_sent_is_sent_again(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider(RECORD)
    gateway.grants.append(execute())
    gateway.settles.extend([httpx.ConnectError("refused"), answer("done", result=RECORD)])

    assert decorated(client, provider)("o-1", "5.00")["status"] == "done"
    assert [s["outcome"] for s in gateway.sent("settle")] == ["done", "done"]


def test_the_lease_is_renewed_while_a_slow_body_runs(gateway: FakeGateway) -> None:
    client = intentgate.Client("http://gateway.test", transport=gateway.transport())
    gateway.grants.append(execute(duration_ms=150))  # renewed every 50 ms
    gateway.settles.append(answer("done"))

    @client.side_effect("refund_order")
    def slow(order_id: str, *, idempotency_key: str) -> str:
        time.sleep(0.4)
        return "re_000001"

    slow("o-1")

    renewals = gateway.sent("renew")
    assert len(renewals) >= 4, renewals
    assert all(body == {"lease": LEASE_TOKEN} for body in renewals)
    assert gateway.requests[1][1] == "/v1/intents/42/renew"
    # No renewal after the settle: the renewer stops before it.
    assert gateway.requests[-1][0] == "settle"


def test_a_call_wakes_the_renewal_thread_only_for_a_lease_due_before_its_next_look(gateway: FakeGateway) -> None:
    # Woken for every call, the thread cost a short call a thread switch and the GIL handed
    # back and forth: more than the rest of the decorator's own work.
    client = intentgate.Client("http://gateway.test", transport=gateway.transport())
    changed = client._renewals._changed
    wakes = 0
    notify = changed.notify

    def counted(n: int = 1) -> None:
        nonlocal wakes
        wakes += 1
        notify(n)

    changed.notify = counted  # type: ignore[method-assign]

    @client.side_effect("refund_order")
    def quick(order_id: str, *, idempotency_key: str) -> str:
        return "re_000001"

    for order in range(20):
        gateway.grants.append(execute())  # a 30 s lease: renewed after 10 s
        gateway.settles.append(answer("done"))
        assert quick(f"o-{order}")["status"] == "done"
    assert wakes == 0

    # A lease due before the thread looks again wakes it, and is renewed in time.
    gateway.grants.append(execute(duration_ms=150))  # renewed every 50 ms
    gateway.settles.append(answer("done"))

    @client.side_effect("refund_order")
    def slow(order_id: str, *, idempotency_key: str) -> str:
        time.sleep(0.2)
        return "re_000001"

    assert slow("o-slow")["status"] == "done"
    assert wakes >= 1
    assert len(gateway.sent("renew")) >= 2


def renewal_threads(besides: list[threading.Thread]) -> list[threading.Thread]:
    """The renewal threads alive now, other than `besides` (those of earlier tests' clients)."""
    return [
        thread for thread in threading.enumerate() if thread.name == "intentgate-renewals" and thread not in besides
    ]


def test_the_renewal_thread_ends_when_idle_and_at_close(gateway: FakeGateway, monkeypatch: pytest.MonkeyPatch) -> None:
    # One thread per client renews every lease; it must not outlive its use, or an
    # application making a client per request would gather threads.
    monkeypatch.setattr(intentgate._client, "RENEWALS_IDLE_SECONDS", 0.2)
    earlier = renewal_threads([])
    for order in ("o-1", "o-2"):
        client = intentgate.Client("http://gateway.test", transport=gateway.transport())
        gateway.grants.append(execute(duration_ms=150))
        gateway.settles.append(answer("done"))

        @client.side_effect("refund_order")
        def slow(order_id: str, *, idempotency_key: str) -> str:
            time.sleep(0.12)
            return "re_000001"

        assert slow(order)["status"] == "done"
        assert len(renewal_threads(earlier)) == 1
        time.sleep(0.5)
        assert renewal_threads(earlier) == [], "ended after the idle time"
    # Started again by the next lease, ended by close().
    monkeypatch.setattr(intentgate._client, "RENEWALS_IDLE_SECONDS", 60.0)
    gateway.grants.append(execute(duration_ms=150))
    gateway.settles.append(answer("done"))
    assert slow("o-3")["status"] == "done"
    assert len(renewal_threads(earlier)) == 1
    client.close()
    deadline = time.monotonic() + 5
    while renewal_threads(earlier) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert renewal_threads(earlier) == [], "ended by close()"


def test_a_lost_lease_stops_renewing_and_the_settle_learns_the_answer(gateway: FakeGateway) -> None:
    client = intentgate.Client("http://gateway.test", transport=gateway.transport())
    gateway.renew_answer = lease_lost()
    gateway.grants.extend([execute(duration_ms=150), answer("already_done")])
    gateway.settles.append(lease_lost())

    @client.side_effect("refund_order")
    def slow(order_id: str, *, idempotency_key: str) -> str:
        time.sleep(0.3)
        return "re_000001"

    assert slow("o-1")["status"] == "already_done"
    assert len(gateway.sent("renew")) == 1


def test_a_float_argument_is_refused_before_anything_is_sent(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider()
    refund_order = decorated(client, provider)

    with pytest.raises(TypeError, match=r"arguments\.amount is a float"):
        refund_order("o-1", 5.0)
    with pytest.raises(TypeError, match=r"float"):
        refund_order("o-1", "5.00", reason={"lines": [{"amount": 0.1}]})
    with pytest.raises(TypeError, match="idempotency_key"):
        refund_order("o-1", "5.00", idempotency_key="mine")
    assert gateway.requests == [] and provider.keys == []


def test_a_float_in_the_result_settles_done_without_it_then_raises(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider({"id": "re_000001", "amount": 5.0})
    gateway.grants.append(execute())
    gateway.settles.append(answer("done"))

    with pytest.raises(TypeError, match=r"result\.amount is a float"):
        decorated(client, provider)("o-1", "5.00")
    # The effect happened: the intent is settled done (with the provider's id) all the same.
    assert gateway.sent("settle") == [{"lease": LEASE_TOKEN, "outcome": "done", "external_id": "re_000001"}]


def test_rounds_are_bounded(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider(*[ProviderTimeout()] * 20)
    gateway.grants.extend([execute()] * 20)
    gateway.settles.extend([execute(resend=True)] * 20)

    with pytest.raises(intentgate.TooManyRounds):
        decorated(client, provider)("o-1", "5.00")
    assert len(provider.keys) == 8


def test_the_wrapper_keeps_the_signature_without_the_key(client: intentgate.Client) -> None:
    refund_order = decorated(client, Provider())

    assert refund_order.__name__ == "refund_order"
    assert refund_order.__doc__ == "Refund part or all of an order."
    assert list(inspect.signature(refund_order).parameters) == ["order_id", "amount", "reason"]
    assert inspect.signature(refund_order).parameters["reason"].default == "requested_by_customer"
    assert "idempotency_key" not in refund_order.__annotations__
    assert "amount" in refund_order.__annotations__


def test_a_function_without_the_key_parameter_is_refused(client: intentgate.Client) -> None:
    with pytest.raises(TypeError, match="idempotency_key"):

        @client.side_effect("refund_order")
        def refund_order(order_id: str) -> None:
            pass

    with pytest.raises(TypeError, match="async"):

        @client.side_effect("refund_order")
        async def refund_async(order_id: str, *, idempotency_key: str) -> None:
            pass


def test_problems_raise_typed_errors_with_their_fields(client: intentgate.Client, gateway: FakeGateway) -> None:
    gateway.grants.append(problem(404, "unknown-tool", "no tool named `refund`; GET /v1/tools lists the tools"))
    gateway.settles.append(lease_lost())

    with pytest.raises(intentgate.IntentGateError) as raised:
        client.grant("refund", {"order_id": "o-1"})
    error = raised.value
    assert (error.status, error.type, error.kind) == (404, "urn:intentgate:problem:unknown-tool", "unknown-tool")
    assert error.detail.startswith("no tool named") and not isinstance(error, intentgate.LeaseLost)

    with pytest.raises(intentgate.LeaseLost) as lost:
        client.settle(42, LEASE_TOKEN, "done", result=None)
    assert lost.value.status == 409
    assert gateway.sent("settle") == [{"lease": LEASE_TOKEN, "outcome": "done", "result": None}]


def test_numbers_in_answers_are_decimals() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b'{"action":"answer","outcome":{"status":"done","result":{"amount":49.10,"n":3}}}')

    client = intentgate.Client("http://gateway.test", transport=httpx.MockTransport(handler))
    result = client.grant("refund_order", {"amount": Decimal("49.10")})["outcome"]["result"]
    assert result == {"amount": Decimal("49.10"), "n": 3} and isinstance(result["amount"], Decimal)
    assert str(result["amount"]) == "49.10"


def test_async_execute_renews_from_a_task_and_looks_up_with_an_async_lookup() -> None:
    gateway = FakeGateway()
    gateway.grants.extend([execute(duration_ms=150), look_up()])
    gateway.settles.extend([answer("pending_unknown"), answer("done", result=RECORD)])
    calls: list[str] = []

    async def find(order_id: str, amount: Decimal, idempotency_key: str) -> dict[str, Any]:
        await asyncio.sleep(0)
        calls.append(f"lookup {order_id} {idempotency_key}")
        return RECORD

    async def main() -> dict[str, Any]:
        async with intentgate.AsyncClient("http://gateway.test", transport=gateway.transport()) as client:

            @client.side_effect("refund_order", ambiguous=ProviderTimeout, lookup=find, external_id=lambda r: r["id"])
            async def refund_order(order_id: str, amount: Decimal, *, idempotency_key: str) -> dict[str, Any]:
                """Refund an order."""
                calls.append(f"refund {order_id} {idempotency_key}")
                await asyncio.sleep(0.3)
                raise ProviderTimeout("no answer")

            assert list(inspect.signature(refund_order).parameters) == ["order_id", "amount"]
            assert inspect.iscoroutinefunction(refund_order)
            return await refund_order("o-1", Decimal("5.00"))

    outcome = asyncio.run(main())

    assert outcome["status"] == "done"
    assert calls == [f"refund o-1 {KEY}", f"lookup o-1 {KEY}"]
    assert len(gateway.sent("renew")) >= 3
    assert [s["outcome"] for s in gateway.sent("settle")] == ["unknown", "done"]
    assert gateway.sent("settle")[1]["external_id"] == "re_000001"


def test_async_rejects_a_float_and_a_sync_function() -> None:
    gateway = FakeGateway()
    client = intentgate.AsyncClient("http://gateway.test", transport=gateway.transport())

    @client.side_effect("refund_order")
    async def refund_order(order_id: str, amount: Decimal, *, idempotency_key: str) -> None:
        raise AssertionError("must not run")

    with pytest.raises(TypeError, match="float"):
        asyncio.run(refund_order("o-1", 5.0))
    with pytest.raises(TypeError, match="not async"):
        client.side_effect("refund_order")(lambda idempotency_key: None)
    assert gateway.requests == []


def test_the_thin_methods_send_what_the_routes_take() -> None:
    seen: list[tuple[str, str, dict[str, str], bytes]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path, dict(request.headers), request.content))
        if request.url.path == "/v1/tools":
            return httpx.Response(200, json={"tools": [{"name": "refund_order", "executor": "client"}]})
        return httpx.Response(200, json={"status": "done", "intent": request.url.path})

    client = intentgate.Client("http://gateway.test/", transport=httpx.MockTransport(handler))
    assert client.tools() == [{"name": "refund_order", "executor": "client"}]
    client.call("get_order", {"order_id": "8812"}, idempotency_key="order-8812", intent_id="conversation-7")
    client.intent(42)
    client.renew(42, LEASE_TOKEN)

    assert [(method, path) for method, path, _, _ in seen] == [
        ("GET", "/v1/tools"),
        ("POST", "/v1/tools/get_order/call"),
        ("GET", "/v1/intents/42"),
        ("POST", "/v1/intents/42/renew"),
    ]
    _, _, headers, body = seen[1]
    assert headers["idempotency-key"] == "order-8812" and headers["intent-id"] == "conversation-7"
    assert body == b'{"arguments":{"order_id":"8812"}}'
    assert "authorization" not in seen[0][2]
    assert seen[3][3] == b'{"lease":"igl_test_token"}'


def test_a_result_refused_as_too_large_is_settled_done_without_it(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider({"id": "re_000001", "receipt": "x" * 70_000})
    gateway.grants.append(execute())
    gateway.settles.extend([problem(422, "too-large", "the result is over 65536 bytes"), answer("done")])

    assert decorated(client, provider)("o-1", "5.00")["status"] == "done"
    first, second = gateway.sent("settle")
    assert "result" in first
    assert second == {"lease": LEASE_TOKEN, "outcome": "done", "external_id": "re_000001"}


class ReplayedServerError(ProviderTimeout):
    """The provider replayed a stored 500 for the key: every re-send gets it again."""


def replay_stop(error: BaseException) -> intentgate.ResendStop | None:
    return "replayed_server_error" if isinstance(error, ReplayedServerError) else None


def test_an_ambiguous_outcome_carries_the_reason_re_sends_stop(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider(ReplayedServerError("500 api_error (replayed)"))
    provider.found = None
    asked: list[BaseException] = []

    def stop(error: BaseException) -> intentgate.ResendStop | None:
        asked.append(error)
        return replay_stop(error)

    gateway.grants.extend([execute(), look_up()])
    # After the stop the gateway grants no re-send: the lookup's not_found is answered.
    gateway.settles.extend([answer("pending_unknown"), answer("pending_unknown")])

    outcome = decorated(client, provider, resend_stop=stop)("o-1", "5.00")

    assert outcome["status"] == "pending_unknown"
    unknown, not_found = gateway.sent("settle")
    assert unknown == {
        "lease": LEASE_TOKEN,
        "outcome": "unknown",
        "reason": "500 api_error (replayed)",
        "resend_stop": "replayed_server_error",
    }
    assert not_found == {"lease": LEASE_TOKEN, "outcome": "not_found"}
    assert provider.keys == [KEY] and len(asked) == 1


def test_resend_stop_is_asked_only_about_unknown_outcomes_and_none_sends_nothing(
    client: intentgate.Client, gateway: FakeGateway
) -> None:
    provider = Provider(Declined("card declined"), ProviderTimeout("timed out"))
    provider.found = RECORD
    asked: list[BaseException] = []

    def stop(error: BaseException) -> intentgate.ResendStop | None:
        asked.append(error)
        return None

    refund_order = decorated(client, provider, resend_stop=stop)
    gateway.grants.extend([execute(), execute(), look_up()])
    gateway.settles.extend([answer("rejected"), answer("pending_unknown"), answer("done", result=RECORD)])

    assert refund_order("o-1", "5.00")["status"] == "rejected"
    assert refund_order("o-1", "5.00")["status"] == "done"

    rejected, unknown, _ = gateway.sent("settle")
    assert "resend_stop" not in rejected and "resend_stop" not in unknown, (rejected, unknown)
    assert [type(error) for error in asked] == [ProviderTimeout]


def test_a_failing_resend_stop_settles_unknown_without_it_then_raises(client: intentgate.Client, gateway: FakeGateway) -> None:
    provider = Provider(ProviderTimeout("timed out"), ProviderTimeout("timed out"))
    gateway.grants.extend([execute(), execute()])
    gateway.settles.extend([answer("pending_unknown"), answer("pending_unknown")])

    def bad_word(error: BaseException) -> intentgate.ResendStop | None:
        return "replayed"  # type: ignore[return-value]

    def broken(error: BaseException) -> intentgate.ResendStop | None:
        raise KeyError("headers")

    with pytest.raises(ValueError, match="replayed_server_error"):
        decorated(client, provider, resend_stop=bad_word)("o-1", "5.00")
    with pytest.raises(KeyError):
        decorated(client, provider, resend_stop=broken)("o-1", "5.00")
    # Settled all the same, so the next caller is granted the lookup at once.
    assert gateway.sent("settle") == [{"lease": LEASE_TOKEN, "outcome": "unknown", "reason": "timed out"}] * 2
    assert gateway.kinds() == ["grant", "settle", "grant", "settle"]


def test_async_an_ambiguous_outcome_carries_the_reason_re_sends_stop() -> None:
    gateway = FakeGateway()
    gateway.grants.extend([execute(), answer("pending_unknown")])
    gateway.settles.append(answer("pending_unknown"))

    async def main() -> dict[str, Any]:
        async with intentgate.AsyncClient("http://gateway.test", transport=gateway.transport()) as client:

            @client.side_effect("refund_order", ambiguous=ProviderTimeout, resend_stop=lambda error: "key_reused")
            async def refund_order(order_id: str, *, idempotency_key: str) -> dict[str, Any]:
                raise ProviderTimeout("400 idempotency_error")

            return await refund_order("o-1")

    assert asyncio.run(main())["status"] == "pending_unknown"
    assert gateway.sent("settle") == [
        {"lease": LEASE_TOKEN, "outcome": "unknown", "reason": "400 idempotency_error", "resend_stop": "key_reused"}
    ]


def test_settle_sends_resend_stop(client: intentgate.Client, gateway: FakeGateway) -> None:
    gateway.settles.append(answer("pending_unknown"))
    client.settle(42, LEASE_TOKEN, "unknown", reason="replayed 500", resend_stop="provider_says_no_retry")
    assert gateway.sent("settle") == [
        {"lease": LEASE_TOKEN, "outcome": "unknown", "reason": "replayed 500", "resend_stop": "provider_says_no_retry"}
    ]
    assert intentgate.RESEND_STOPS == {"replayed_server_error", "provider_says_no_retry", "key_reused"}
