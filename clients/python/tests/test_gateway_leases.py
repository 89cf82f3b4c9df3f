"""Leases against the real gateway: a worker killed inside the body leaves an unknown intent
that the next caller resolves through the lookup, and a settle after the lease expired is
refused without changing the intent."""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import sys
import time
from decimal import Decimal
from typing import Any

import pytest

import intentgate
from processes import LEASE_MS, PROCESS_WAIT_SECONDS, Gateway, Mock

#: Longest wait for a dead caller's lease to run out: a lease lasts the tool's timeout
#: plus the gateway's margin (5 s) from its last renewal.
LEASE_WAIT_SECONDS = LEASE_MS / 1000 + 5 + 10


def test_a_worker_killed_inside_the_body_is_resolved_by_the_next_callers_lookup(
    mock: Mock, gateway: Gateway, tmp_path: Any
) -> None:
    worker = subprocess.Popen(
        [sys.executable, str(pathlib.Path(__file__).parent / "processes.py"), "kill-worker", gateway.url, mock.url, "kill-1", "12.50"],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "worker.log").open("w"),
        text=True,
    )
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        assert line, f"the worker ended before sending; see {tmp_path / 'worker.log'}"
        sent = json.loads(line)
        assert sent["sent"] == 200
        # Killed after its refund reached the provider, before it could settle.
        worker.send_signal(signal.SIGKILL)
        worker.wait(PROCESS_WAIT_SECONDS)
    finally:
        worker.kill()
        worker.wait()
    key = sent["key"]
    assert mock.effects()["by_intent_key"] == {key: 1}
    (refund,) = mock.refunds(key)

    runs: list[str] = []
    with intentgate.Client(gateway.url, timeout=30) as client:

        # The refund tool with a body that only counts its runs: the lookup must settle the
        # intent, so there are none.
        @client.side_effect("refund_order", lookup=find_in(mock), external_id="id")
        def refund_order(order_id: str, amount: Decimal, *, idempotency_key: str) -> Any:
            runs.append(idempotency_key)
            return {"id": "re_never"}

        # The dead worker's lease runs out (the tool's timeout plus the gateway's margin after
        # its last renewal); until then each call waits a while and is told pending_unknown.
        deadline = time.monotonic() + LEASE_WAIT_SECONDS
        outcome = refund_order("kill-1", Decimal("12.50"))
        while outcome["status"] == "pending_unknown" and time.monotonic() < deadline:
            time.sleep(0.5)
            outcome = refund_order("kill-1", Decimal("12.50"))

    assert outcome["status"] in {"done", "already_done"}, outcome
    assert outcome["result"]["id"] == refund["id"]
    assert runs == []
    assert mock.effects()["by_intent_key"] == {key: 1}


def test_a_settle_after_the_lease_expired_is_refused_and_changes_nothing(mock: Mock, gateway: Gateway) -> None:
    with intentgate.Client(gateway.url, timeout=30) as client:
        grant = client.grant("refund_order", {"order_id": "late-1", "amount": Decimal("3.00")})
        assert grant["action"] == "execute", grant
        assert grant["lease"]["duration_ms"] >= LEASE_MS
        # Past the lease (the tool's timeout and the gateway's margin).
        time.sleep(grant["lease"]["duration_ms"] / 1000 + 1.0)
        before = client.intent(grant["intent_id"])

        with pytest.raises(intentgate.LeaseLost) as refused:
            client.settle(grant["intent_id"], grant["lease"]["token"], "done", result={"id": "re_999999"}, external_id="re_999999")
        assert refused.value.status == 409 and refused.value.kind == "lease-lost"
        with pytest.raises(intentgate.LeaseLost):
            client.renew(grant["intent_id"], grant["lease"]["token"])

        assert client.intent(grant["intent_id"]) == before
        # The next caller is told to look it up, since the first attempt's outcome is unknown.
        again = client.grant("refund_order", {"order_id": "late-1", "amount": "3.00"})
        assert again["action"] == "look_up", again
        assert again["intent_id"] == grant["intent_id"]
        assert again["idempotency_key"] == grant["idempotency_key"]
        assert again["lease"]["token"] != grant["lease"]["token"]


def find_in(mock: Mock) -> Any:
    """A lookup asking the mock provider for the refund made under a key."""

    def find_refund(order_id: str, amount: Decimal, idempotency_key: str) -> dict[str, Any] | None:
        found = mock.refunds(idempotency_key)
        return found[0] if found else None

    return find_refund
