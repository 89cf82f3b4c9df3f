"""The client-executed Stripe refund of clients/python/examples/stripe_refund.py, as it ships:
the decorator around `stripe.Refund.create` (the official SDK, its own network retries on),
`intentgate serve` with the example's config, and localstripe (a stateful Stripe emulator
from PyPI) behind the tests' fault proxy, which plays Stripe's idempotency-key layer.

Each test refunds its own payment intents and asserts from localstripe's own refund list:
one refund per intent, the amount in cents, the key in its metadata, and what the decorated
function answered. Without target/stripe-venv or the stripe SDK these tests are skipped,
saying why; with CI=true they fail instead.

What the SDK (stripe 16.1.0) does with each fault, seen here:
- an answer lost after the refund committed: a connection error, which the SDK retries with
  the same `Idempotency-Key`; the proxy replays the stored answer, so the SDK returns the
  refund that was made.
- a 500 stored under the key: the SDK retries a 5xx unless `Stripe-Should-Retry: false`, and
  each retry gets the same 500 replayed (`Idempotent-Replayed: true`); after its retries it
  raises `APIError`, the decorator settles unknown and the gateway grants the lookup, which
  finds the refund.
- a timeout before the request reached Stripe: the SDK retries it; when every one of its
  tries times out it raises `APIConnectionError`, the lookup finds nothing, and the gateway
  grants the same request again with the same key.
- a 500 stored under the key before anything committed: the SDK's retries get it replayed;
  the decorator settles unknown saying so (`resend_stop`), and the gateway grants lookups
  only, never a re-send that would get the same 500.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from types import ModuleType
from typing import Any

import httpx
import pytest

import intentgate
from processes import REPOSITORY, Gateway
from stripe_processes import SECRET_KEY, FaultProxy, LocalStripe, missing

EXAMPLES = REPOSITORY / "clients" / "python" / "examples"
CONFIG = EXAMPLES / "stripe_refund.yaml"
#: The SDK's HTTP timeout here: a held request (the proxy's `timeout_before`) costs this.
SDK_TIMEOUT_SECONDS = 2.0
#: The SDK's tries of one request: the first and its network retries.
SDK_TRIES = 3
#: The gateway's least time between two lookups of one intent (`LOOKUP_INTERVAL`), and a
#: margin over it.
LOOKUP_INTERVAL_SECONDS = 5.0
LOOKUP_DUE_SECONDS = LOOKUP_INTERVAL_SECONDS + 0.5


@dataclass
class Stripe:
    """Everything one test uses."""

    example: ModuleType
    localstripe: LocalStripe
    proxy: FaultProxy
    refund_order: Callable[..., dict[str, Any]]
    #: The gateway's address.
    gateway: str

    def key(self, payment_intent: str, amount: str) -> str:
        """The provider key the gateway grants for refunding `amount` of `payment_intent`."""
        return f"refund_order:refund:{payment_intent}:{amount}"

    def intent(self, payment_intent: str, amount: str) -> dict[str, Any]:
        """The intent of refunding `amount` of `payment_intent`, as the gateway shows it."""
        key = urllib.parse.quote(f"refund:{payment_intent}:{amount}", safe=":")
        answer = httpx.get(f"{self.gateway}/v1/intents/refund_order/{key}", timeout=10)
        answer.raise_for_status()
        return answer.json()  # type: ignore[no-any-return]


def example_module() -> ModuleType:
    """The example, imported once the stripe SDK is known to be here."""
    why = missing()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    sys.path.insert(0, str(EXAMPLES))
    import stripe_refund

    return stripe_refund


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stripe]:
    example = example_module()
    folder = tmp_path_factory.mktemp("stripe")
    localstripe = LocalStripe(folder)
    proxy = FaultProxy(folder, localstripe.url)
    gateway = Gateway(folder, config=CONFIG)
    example.configure(SECRET_KEY, proxy.url, timeout_seconds=SDK_TIMEOUT_SECONDS)
    try:
        with intentgate.Client(gateway.url, timeout=60) as client:
            yield Stripe(example, localstripe, proxy, example.refund_tool(client), gateway.url)
    finally:
        gateway.stop()
        proxy.stop()
        localstripe.stop()


@pytest.fixture
def stripe_env(running: Stripe) -> Stripe:
    running.proxy.reset()
    return running


def refunds_by_key(env: Stripe, payment_intent: str) -> dict[str, list[dict[str, Any]]]:
    """localstripe's refunds of `payment_intent`, by the provider key in their metadata."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for refund in env.localstripe.refunds(payment_intent):
        by_key.setdefault(refund["metadata"].get("intentgate_key"), []).append(refund)
    return by_key


def only_refund(env: Stripe, payment_intent: str, amount: str, cents: int) -> dict[str, Any]:
    """The one refund of `payment_intent`, checked: under the intent's key, of `cents`."""
    refunds = env.localstripe.refunds(payment_intent)
    assert len(refunds) == 1, refunds
    refund = refunds[0]
    assert refund["amount"] == cents and refund["currency"] == "usd", refund
    assert refund["metadata"] == {"intentgate_key": env.key(payment_intent, amount)}, refund
    return refund


def posts(env: Stripe, key: str) -> list[dict[str, Any]]:
    return [r for r in env.proxy.requests(key) if r["method"] == "POST" and r["path"] == "/v1/refunds"]


def lookups(env: Stripe) -> list[dict[str, Any]]:
    return [r for r in env.proxy.requests() if r["method"] == "GET" and r["path"] == "/v1/refunds"]


def test_amounts_become_cents_exactly() -> None:
    example = example_module()
    assert example.to_minor_units(Decimal("49.00")) == 4900
    assert example.to_minor_units(Decimal("49")) == 4900
    assert example.to_minor_units(Decimal("0.5")) == 50
    assert example.to_minor_units(Decimal("1E+2")) == 10000
    assert example.to_minor_units("12.34") == 1234
    assert example.to_minor_units(Decimal("4900"), 0) == 4900
    assert example.to_minor_units(Decimal("1.234"), 3) == 1234
    for refused in ("49.001", "49.000", "0", "-1.00", "NaN", "Infinity", "forty"):
        with pytest.raises(example.InvalidAmount):
            example.to_minor_units(Decimal(refused) if refused != "forty" else refused)
    with pytest.raises(TypeError):
        example.to_minor_units(49.0)


def test_a_refund_is_made_once_and_repeats_are_answered_from_the_ledger(stripe_env: Stripe) -> None:
    payment_intent = stripe_env.localstripe.payment_intent(10000)

    first = stripe_env.refund_order(payment_intent, Decimal("49.00"))
    again = stripe_env.refund_order(payment_intent, Decimal("49.00"))
    as_text = stripe_env.refund_order(payment_intent, "49.00")

    refund = only_refund(stripe_env, payment_intent, "49.00", 4900)
    assert first["status"] == "done", first
    assert first["result"]["id"] == refund["id"] and first["result"]["amount"] == 4900, first
    for repeat in (again, as_text):
        assert repeat["status"] == "already_done" and repeat["result"] == first["result"], repeat
    # The repeats sent nothing to Stripe.
    assert len(posts(stripe_env, stripe_env.key(payment_intent, "49.00"))) == 1


def test_an_answer_lost_after_the_refund_is_replayed_to_the_sdks_own_retry(stripe_env: Stripe) -> None:
    payment_intent = stripe_env.localstripe.payment_intent(10000)
    key = stripe_env.key(payment_intent, "25.50")
    stripe_env.proxy.faults("lose_answer")

    outcome = stripe_env.refund_order(payment_intent, Decimal("25.50"))

    refund = only_refund(stripe_env, payment_intent, "25.50", 2550)
    assert outcome["status"] == "done" and outcome["result"]["id"] == refund["id"], outcome
    sent = posts(stripe_env, key)
    assert [(r["forwarded"], r["status"], r["replayed"]) for r in sent] == [(True, None, False), (False, 200, True)], sent
    # The SDK's retry settled it: the gateway had nothing to look up.
    assert lookups(stripe_env) == []


def test_a_stored_500_is_replayed_until_the_sdk_gives_up_and_the_lookup_finds_the_refund(stripe_env: Stripe) -> None:
    payment_intent = stripe_env.localstripe.payment_intent(10000)
    key = stripe_env.key(payment_intent, "10.00")
    # A refund of the same payment by another intent is on the list the lookup reads.
    other = stripe_env.refund_order(payment_intent, Decimal("15.00"))
    assert other["status"] == "done", other
    stripe_env.proxy.reset()
    stripe_env.proxy.faults("store_500")

    outcome = stripe_env.refund_order(payment_intent, Decimal("10.00"))
    repeat = stripe_env.refund_order(payment_intent, Decimal("10.00"))

    by_key = refunds_by_key(stripe_env, payment_intent)
    assert sorted(by_key) == sorted([key, stripe_env.key(payment_intent, "15.00")]), by_key
    assert [r["amount"] for r in by_key[key]] == [1000], by_key
    assert [r["amount"] for r in by_key[stripe_env.key(payment_intent, "15.00")]] == [1500], by_key
    refund = by_key[key][0]
    # Found by the lookup of an earlier attempt's unknown outcome: `already_done`, with the
    # refund the lookup proved as the result, not the 500.
    assert outcome["status"] == "already_done", outcome
    assert outcome["result"]["id"] == refund["id"] and outcome["result"]["amount"] == 1000, outcome
    assert repeat["status"] == "already_done" and repeat["result"]["id"] == refund["id"], repeat
    # The first try committed and got the 500; each of the SDK's retries got it replayed.
    sent = posts(stripe_env, key)
    assert [(r["forwarded"], r["status"], r["replayed"]) for r in sent] == [(True, 500, False)] + [(False, 500, True)] * (
        SDK_TRIES - 1
    ), sent
    # Then one lookup, and no same-key request after it.
    assert len(lookups(stripe_env)) == 1


def test_timeouts_before_stripe_end_in_a_lookup_that_finds_nothing_and_one_resend(stripe_env: Stripe) -> None:
    payment_intent = stripe_env.localstripe.payment_intent(10000)
    key = stripe_env.key(payment_intent, "7.25")
    # Every try of the SDK is held and never reaches localstripe.
    stripe_env.proxy.faults(*["timeout_before"] * SDK_TRIES)

    outcome = stripe_env.refund_order(payment_intent, Decimal("7.25"))

    refund = only_refund(stripe_env, payment_intent, "7.25", 725)
    assert outcome["status"] == "done" and outcome["result"]["id"] == refund["id"], outcome
    sent = posts(stripe_env, key)
    assert [(r["forwarded"], r["fault"]) for r in sent] == [(False, "timeout_before")] * SDK_TRIES + [(True, None)], sent
    assert len(lookups(stripe_env)) == 1


def test_one_timeout_is_the_sdks_own_retry(stripe_env: Stripe) -> None:
    payment_intent = stripe_env.localstripe.payment_intent(10000)
    key = stripe_env.key(payment_intent, "3.00")
    stripe_env.proxy.faults("timeout_before")

    outcome = stripe_env.refund_order(payment_intent, Decimal("3.00"))

    refund = only_refund(stripe_env, payment_intent, "3.00", 300)
    assert outcome["status"] == "done" and outcome["result"]["id"] == refund["id"], outcome
    assert [r["forwarded"] for r in posts(stripe_env, key)] == [False, True]
    assert lookups(stripe_env) == []


def test_a_dropped_connection_is_retried_by_the_sdk(stripe_env: Stripe) -> None:
    payment_intent = stripe_env.localstripe.payment_intent(10000)
    stripe_env.proxy.faults("drop")

    outcome = stripe_env.refund_order(payment_intent, Decimal("1.99"))

    refund = only_refund(stripe_env, payment_intent, "1.99", 199)
    assert outcome["status"] == "done" and outcome["result"]["id"] == refund["id"], outcome


def test_a_429_is_not_executed_and_a_later_call_refunds(stripe_env: Stripe) -> None:
    payment_intent = stripe_env.localstripe.payment_intent(10000)
    stripe_env.proxy.faults("rate_limit")

    limited = stripe_env.refund_order(payment_intent, Decimal("5.00"))
    assert limited["status"] == "not_executed", limited
    assert stripe_env.localstripe.refunds(payment_intent) == []

    later = stripe_env.refund_order(payment_intent, Decimal("5.00"))
    refund = only_refund(stripe_env, payment_intent, "5.00", 500)
    assert later["status"] == "done" and later["result"]["id"] == refund["id"], later


def test_a_refund_under_the_key_with_another_amount_proves_nothing(stripe_env: Stripe) -> None:
    payment_intent = stripe_env.localstripe.payment_intent(10000)
    key = stripe_env.key(payment_intent, "20.00")
    # Made by hand, around the gateway: the intent's key, but 20.01.
    stray = stripe_env.localstripe.refund(payment_intent, 2001, {"intentgate_key": key})
    stripe_env.proxy.faults(*["timeout_before"] * SDK_TRIES)

    outcome = stripe_env.refund_order(payment_intent, Decimal("20.00"))

    # The lookup refused to take the stray refund for this intent's, and nothing was sent
    # after it: the intent waits for an operator, unknown.
    assert outcome["status"] == "pending_unknown", outcome
    assert [r["id"] for r in stripe_env.localstripe.refunds(payment_intent)] == [stray["id"]]
    assert not any(r["forwarded"] for r in posts(stripe_env, key))


def test_stripe_refusing_the_refund_is_rejected(stripe_env: Stripe) -> None:
    # localstripe answers 404 for a payment intent it doesn't have: InvalidRequestError.
    outcome = stripe_env.refund_order("pi_doesnotexist", Decimal("1.00"))
    assert outcome["status"] == "rejected", outcome


def test_an_amount_with_more_places_than_cents_is_refused_before_anything_is_sent(stripe_env: Stripe) -> None:
    payment_intent = stripe_env.localstripe.payment_intent(10000)

    outcome = stripe_env.refund_order(payment_intent, Decimal("49.001"))

    assert outcome["status"] == "invalid_arguments", outcome
    assert stripe_env.proxy.requests() == []
    assert stripe_env.localstripe.refunds(payment_intent) == []


def test_a_stored_500_before_the_refund_committed_stops_re_sends_and_only_lookups_follow(stripe_env: Stripe) -> None:
    payment_intent = stripe_env.localstripe.payment_intent(10000)
    key = stripe_env.key(payment_intent, "12.00")
    # Stripe failed before refunding and stored the 500 under the key: every request with
    # the key gets it replayed for 24 hours.
    stripe_env.proxy.faults("store_500_before")

    outcome = stripe_env.refund_order(payment_intent, Decimal("12.00"))

    assert outcome["status"] == "pending_unknown", outcome
    assert stripe_env.localstripe.refunds(payment_intent) == []
    # The SDK's own tries: the stored 500, then its retries' replays. The last replay stopped
    # the re-sends; the lookup found nothing, and no re-send was granted (before, one was at
    # once: three more POSTs, each replayed the same 500).
    sent = posts(stripe_env, key)
    assert [(r["forwarded"], r["status"], r["replayed"]) for r in sent] == [(False, 500, False)] + [(False, 500, True)] * (
        SDK_TRIES - 1
    ), sent
    assert len(lookups(stripe_env)) == 1
    intent = stripe_env.intent(payment_intent, "12.00")
    assert (intent["status"], intent["attempts"], intent.get("resend_stopped")) == (
        "unknown",
        1,
        "replayed_server_error",
    ), intent

    # Later calls: answered pending while no lookup is due ...
    for _ in range(3):
        later = stripe_env.refund_order(payment_intent, Decimal("12.00"))
        assert later["status"] == "pending_unknown", later
    # ... and once one is due, the lookup, never a re-send.
    time.sleep(LOOKUP_DUE_SECONDS)
    for _ in range(2):
        later = stripe_env.refund_order(payment_intent, Decimal("12.00"))
        assert later["status"] == "pending_unknown", later
    assert len(posts(stripe_env, key)) == SDK_TRIES, posts(stripe_env, key)
    assert len(lookups(stripe_env)) == 2, lookups(stripe_env)
    assert stripe_env.localstripe.refunds(payment_intent) == []
    intent = stripe_env.intent(payment_intent, "12.00")
    assert (intent["status"], intent["attempts"], intent.get("resend_stopped")) == (
        "unknown",
        1,
        "replayed_server_error",
    ), intent


def test_resend_stop_reads_stripes_headers_on_its_errors() -> None:
    example = example_module()
    import stripe

    def api_error(status: int, headers: dict[str, str]) -> stripe.APIError:
        return stripe.APIError("An unknown error occurred", http_status=status, headers=headers)

    assert example.resend_stop(api_error(500, {"Idempotent-Replayed": "true"})) == "replayed_server_error"
    assert example.resend_stop(api_error(503, {"idempotent-replayed": "true"})) == "replayed_server_error"
    assert example.resend_stop(api_error(500, {"Stripe-Should-Retry": "false"})) == "provider_says_no_retry"
    assert example.resend_stop(api_error(500, {})) is None
    assert example.resend_stop(api_error(500, {"Stripe-Should-Retry": "true"})) is None
    # A 409 while another request of the key runs says nothing of a later re-send.
    assert example.resend_stop(api_error(409, {"Stripe-Should-Retry": "false"})) is None
    assert example.resend_stop(stripe.IdempotencyError("Keys for idempotent requests ...", http_status=400)) == "key_reused"
    assert example.resend_stop(stripe.APIConnectionError("timed out")) is None
