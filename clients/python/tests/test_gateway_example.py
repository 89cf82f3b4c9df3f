"""The repository's example config as it ships: its client-executed `refund_order_sdk`
through the decorator, beside the gateway-executed `refund_order` of the same intent key
scheme."""

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
    finally:
        gateway.stop()

    assert first["status"] == "done", first
    assert again["status"] == "already_done" and again["result"]["id"] == first["result"]["id"]
    assert other_text["status"] == "already_done", other_text
    assert other_text["result"]["id"] == first["result"]["id"]
    assert len(mock.refunds("refund_order_sdk:refund:8812:49.00")) == 1
    assert mock.effects()["total"] == 1
    assert 400 <= refused.value.status < 500 and refused.value.detail
