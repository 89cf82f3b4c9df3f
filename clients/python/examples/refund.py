"""The refund tool of the package README, on its own: `refund_order(order_id, amount)`
refunds through a payments API (the repository's mock provider, `intentgate mock-provider`)
at most once per order and amount, as the client-executed `refund_order_sdk` of
`examples/support-agent.yaml`. The agent-framework examples beside this file import it:
`openai_agents_refund.py` (the OpenAI Agents SDK) and `pydantic_ai_refund.py` (Pydantic AI).

Environment: `INTENTGATE_URL` (default `http://127.0.0.1:8080`), `INTENTGATE_API_KEY` (when
the gateway's `auth` has API keys) and `INTENTGATE_MOCK_URL` (default
`http://127.0.0.1:8090`).
"""

from __future__ import annotations

import os
from decimal import Decimal
from typing import Any

import httpx

import intentgate

gateway = intentgate.Client(
    os.environ.get("INTENTGATE_URL", "http://127.0.0.1:8080"),
    api_key=os.environ.get("INTENTGATE_API_KEY"),
)
payments = httpx.Client(base_url=os.environ.get("INTENTGATE_MOCK_URL", "http://127.0.0.1:8090"), timeout=10)


class CardDeclined(Exception):
    """The provider refused the refund; nothing happened."""


class RateLimited(Exception):
    """The provider answered 429 before processing anything."""


def find_refund(order_id: str, amount: Decimal, idempotency_key: str) -> dict[str, Any] | None:
    """The refund made under this key, or None when the provider has none."""
    found = payments.get("/v1/refunds", params={"idempotency_key": idempotency_key})
    found.raise_for_status()
    data = found.json()["data"]
    return data[0] if data else None


@gateway.side_effect(
    "refund_order_sdk",
    rejected=CardDeclined,
    not_processed=RateLimited,
    ambiguous=httpx.TransportError,
    lookup=find_refund,
    external_id="id",
)
def refund_order(order_id: str, amount: Decimal, *, idempotency_key: str) -> dict[str, Any]:
    """Refund part or all of an order. Safe to call once per order and amount."""
    response = payments.post(
        "/v1/refunds",
        json={"order_id": order_id, "amount": str(amount), "metadata": {"intent_key": idempotency_key}},
        headers={"Idempotency-Key": idempotency_key},
    )
    if response.status_code == 402:
        raise CardDeclined(response.json()["error"]["message"])
    if response.status_code == 429:
        raise RateLimited("rate limited")
    response.raise_for_status()  # a 5xx is not listed above, so it counts as unknown
    return response.json()  # type: ignore[no-any-return]
