"""`AsyncClient.side_effect` against the real gateway: concurrent calls of one intent from
one event loop, the provider's first request for every key lost in a timeout, make one
refund, and every caller is told the same once it is settled."""

from __future__ import annotations

import asyncio
import collections
import time
from decimal import Decimal
from typing import Any

import httpx

import intentgate
from processes import PROVIDER_TIMEOUT_SECONDS, Gateway, Mock

CALLS = 12
#: Longest time for the intent to be settled once the provider answers (lookups of one
#: intent are at most one per 5 s).
SETTLE_SECONDS = 30


def test_concurrent_async_calls_make_one_refund(mock: Mock, gateway: Gateway) -> None:
    mock.faults(first_timeouts_per_key=1)
    key = "refund_order:refund:async-1:9.99"

    async def main() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        async with (
            intentgate.AsyncClient(gateway.url, timeout=30) as client,
            httpx.AsyncClient(base_url=mock.url, timeout=PROVIDER_TIMEOUT_SECONDS) as provider,
        ):

            async def find_refund(order_id: str, amount: Decimal, idempotency_key: str) -> dict[str, Any] | None:
                found = await provider.get("/v1/refunds", params={"intent_key": idempotency_key})
                found.raise_for_status()
                data = found.json()["data"]
                return data[0] if data else None

            @client.side_effect("refund_order", lookup=find_refund, external_id="id")
            async def refund_order(order_id: str, amount: Decimal, *, idempotency_key: str) -> dict[str, Any]:
                """Refund part or all of an order."""
                response = await provider.post(
                    "/v1/refunds",
                    json={"order_id": order_id, "amount": str(amount), "metadata": {"intent_key": idempotency_key}},
                    headers={"Idempotency-Key": idempotency_key},
                )
                response.raise_for_status()
                return response.json()  # type: ignore[no-any-return]

            first = await asyncio.gather(*(refund_order("async-1", Decimal("9.99")) for _ in range(CALLS)))
            deadline = time.monotonic() + SETTLE_SECONDS
            last = await refund_order("async-1", Decimal("9.99"))
            while last["status"] == "pending_unknown" and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                last = await refund_order("async-1", Decimal("9.99"))
            return list(first), last

    first, last = asyncio.run(main())

    print(f"\nasync: {CALLS} concurrent calls answered {dict(collections.Counter(o['status'] for o in first))}; then {last['status']}")
    (refund,) = mock.refunds(key)
    assert mock.effects()["by_intent_key"] == {key: 1}
    assert last["status"] in {"done", "already_done"} and last["result"]["id"] == refund["id"]
    for outcome in first:
        assert outcome["status"] in {"done", "already_done", "pending_unknown"}, outcome
        if outcome["status"] != "pending_unknown":
            assert outcome["result"]["id"] == refund["id"]
