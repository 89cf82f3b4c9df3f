"""Refusals through the real gateway: a card error is `rejected` and stays so for repeats
(the body doesn't run again), and a rate limit is `not_executed`, after which the next call
runs the body and makes the one refund."""

from __future__ import annotations

from decimal import Decimal

import intentgate
from processes import Gateway, Mock, refund_tool


def test_a_rejection_is_told_to_every_repeat_without_running_again(mock: Mock, gateway: Gateway) -> None:
    mock.faults(reject=1000)
    with intentgate.Client(gateway.url, timeout=30) as client:
        refund_order = refund_tool(client, mock.url)
        first = refund_order("declined-1", Decimal("20.00"))
        mock.faults()
        again = refund_order("declined-1", Decimal("20.00"))

    assert first["status"] == "rejected", first
    # The provider's reason, settled by the decorator, is in what the model reads.
    assert "Your card was declined." in first["message"]
    assert again["status"] == "rejected", again
    assert mock.stats()["requests"] == 1
    assert mock.effects()["total"] == 0


def test_not_executed_then_the_next_call_runs_it(mock: Mock, gateway: Gateway) -> None:
    mock.faults(rate_limited=1000)
    with intentgate.Client(gateway.url, timeout=30) as client:
        refund_order = refund_tool(client, mock.url)
        first = refund_order("limited-1", Decimal("20.00"))
        mock.faults()
        second = refund_order("limited-1", Decimal("20.00"))
        third = refund_order("limited-1", Decimal("20.00"))

    assert first["status"] == "not_executed", first
    assert second["status"] == "done", second
    assert third["status"] == "already_done" and third["result"]["id"] == second["result"]["id"]
    assert mock.effects()["by_intent_key"] == {"refund_order:refund:limited-1:20.00": 1}
    assert mock.stats()["requests"] == 2
