"""The repository's example config as it ships: its client-executed `refund_order_sdk`
through the decorator, beside the gateway-executed `refund_order`, a separate intent whose
key reads alike; and `charge_card`, whose key is the application's intent id."""

from __future__ import annotations

import pathlib
from decimal import Decimal

import httpx
import pytest

import intentgate
from processes import EXAMPLE_CONFIG, PROVIDER_TIMEOUT_SECONDS, Gateway, Mock


def test_the_examples_sdk_refund_runs_through_the_decorator(tmp_path: pathlib.Path, mock: Mock) -> None:
    folder = tmp_path / "example"
    folder.mkdir()
    env = {"INTENTGATE_MOCK_URL": mock.url, "INTENTGATE_HASH_KEY": "0123456789abcdef0123456789abcdef-python-client"}
    gateway = Gateway(folder, config=EXAMPLE_CONFIG, env=env)
    try:
        with intentgate.Client(gateway.url, timeout=60) as client, httpx.Client(base_url=mock.url, timeout=PROVIDER_TIMEOUT_SECONDS) as payments:
            listed = {tool["name"]: tool for tool in client.tools()}
            assert listed["refund_order_sdk"]["executor"] == "client"

            @client.side_effect("refund_order_sdk", external_id="id")
            def refund_order_sdk(order_id: str, amount: Decimal, *, idempotency_key: str) -> dict[str, object]:
                """Refund part or all of an order through the payments SDK."""
                response = payments.post(
                    "/v1/refunds",
                    json={"order_id": order_id, "amount": str(amount), "metadata": {"intent_key": idempotency_key}},
                    headers={"Idempotency-Key": idempotency_key},
                )
                response.raise_for_status()
                return response.json()  # type: ignore[no-any-return]

            first = refund_order_sdk("8812", Decimal("49.00"))
            again = refund_order_sdk("8812", "49.00")
            # The amount is a string whose schema pattern is a decimal, so "49" is read as
            # the number it spells: the same key and the same arguments, one intent.
            other_text = refund_order_sdk("8812", Decimal("49"))
            # The tool the gateway executes itself is refused through the intent API.
            with pytest.raises(intentgate.IntentGateError) as refused:
                client.grant("refund_order", {"order_id": "8812", "amount": "49.00"})
            # As the example says, the two refund tools never share an intent: the same
            # order and amount through the gateway's tool is a refund of its own.
            gateway_refund = client.call("refund_order", {"order_id": "8812", "amount": 49, "reason": "damaged"})
    finally:
        gateway.stop()

    assert first["status"] == "done", first
    assert again["status"] == "already_done" and again["result"]["id"] == first["result"]["id"]
    assert other_text["status"] == "already_done", other_text
    assert other_text["result"]["id"] == first["result"]["id"]
    assert len(mock.refunds("refund_order_sdk:refund:8812:49.00")) == 1
    assert refused.value.status == 409 and refused.value.kind == "not-client-executed", refused.value
    assert gateway_refund["status"] == "done", gateway_refund
    assert gateway_refund["result"]["id"] != first["result"]["id"]
    assert len(mock.refunds("refund:8812:49.00")) == 1  # the gateway writes its intent key there
    assert mock.effects()["total"] == 2


# Found by a new user: a call that lacked the application's intent id answered
# `invalid_arguments` with "fix the arguments and call again", which the model can't do and
# would retry.
def test_a_call_without_the_applications_intent_id_says_to_tell_the_user(tmp_path: pathlib.Path, mock: Mock) -> None:
    folder = tmp_path / "example"
    folder.mkdir()
    env = {"INTENTGATE_MOCK_URL": mock.url, "INTENTGATE_HASH_KEY": "0123456789abcdef0123456789abcdef-python-client"}
    gateway = Gateway(folder, config=EXAMPLE_CONFIG, env=env)
    charge = {"customer_id": "cus_1042", "amount": 25, "currency": "usd"}
    try:
        with intentgate.Client(gateway.url, timeout=60) as client:
            listed = {tool["name"]: tool for tool in client.tools()}
            missing = [client.call("charge_card", charge) for _ in range(3)]
            charged = client.call("charge_card", charge, intent_id="cr_7731")
    finally:
        gateway.stop()

    assert listed["charge_card"]["needs_intent_id"] is True
    assert '_meta "intentgate/intent_id"' in listed["charge_card"]["description"]
    assert "Intent-Id" in listed["charge_card"]["description"]
    assert listed["refund_order"]["needs_intent_id"] is False
    first = missing[0]
    assert first["status"] == "invalid_arguments", first
    assert first["reason"] == intentgate.MISSING_INTENT_ID
    assert "Do not retry charge_card" in first["message"] and "tell the user" in first["message"]
    assert "fix the arguments" not in first["message"].lower()
    assert any("Intent-Id" in error and "intentgate/intent_id" in error for error in first["errors"])
    # Nothing was recorded, so a retry gets the same answer, and nothing was charged.
    assert missing[1] == first and missing[2] == first
    assert list(first)[:3] == ["status", "reason", "message"]
    assert charged["status"] == "done", charged
    assert mock.effects()["total"] == 1
