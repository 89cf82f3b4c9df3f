"""A decorated tool whose calls need approval, through the real gateway: while the intent
is held the body never runs and the decorator returns `awaiting_approval` as an outcome the
model reads (never an exception a framework would retry); once an approver with the
`approve` scope approves it, the next call runs the body once; a denial is `rejected` with
the approver's reason, for good."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from decimal import Decimal

import httpx
import pytest

import intentgate
from processes import CONFIG, Gateway, Mock, refund_tool, with_api_keys

AGENT_KEY = "igk_test_agent_0123456789abcdef0123456789abcdef"
APPROVER_KEY = "igk_test_approver_0123456789abcdef0123456789ab"
ADMIN_TOKEN = "admin-token-0123456789abcdef0123456789abcdef"

#: Refunds over 100 wait for a person.
APPROVAL = "    approval:\n      when: amount > 100\n"


@pytest.fixture
def held_gateway(tmp_path: pathlib.Path, mock: Mock) -> Iterator[Gateway]:
    folder = tmp_path / "held"
    folder.mkdir()
    anchor = "    key_window_hours: 24\n"
    assert anchor in CONFIG
    config = with_api_keys(
        CONFIG.replace(anchor, anchor + APPROVAL),
        [("support-agent", AGENT_KEY, "acme", "call"), ("approver", APPROVER_KEY, "acme", "approve")],
    )
    path = folder / "gateway.yaml"
    path.write_text(config)
    gateway = Gateway(folder, config=path, env={"INTENTGATE_ADMIN_TOKEN": ADMIN_TOKEN})
    yield gateway
    gateway.stop()


def decide(gateway: Gateway, order_id: str, route: str, reason: str) -> dict:
    """The approver's decision on the held refund of `order_id`, through the admin API."""
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {APPROVER_KEY}"}, timeout=30) as admin:
        held = admin.get("/v1/admin/approvals", params={"state": "open"}).json()["approvals"]
        (intent,) = [one for one in held if one["arguments"]["order_id"] == order_id]
        answer = admin.post(f"/v1/admin/approvals/{intent['intent_id']}/{route}", json={"reason": reason})
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]


def test_a_held_refund_runs_nothing_until_approved_then_runs_once(mock: Mock, held_gateway: Gateway) -> None:
    with intentgate.Client(held_gateway.url, AGENT_KEY, timeout=30) as client:
        refund_order = refund_tool(client, mock.url)
        small = refund_order("small-1", Decimal("20.00"))
        held = [refund_order("big-1", Decimal("150.00")) for _ in range(3)]
        assert small["status"] == "done", small
        for answer in held:
            assert answer["status"] == "awaiting_approval", answer
            assert "approve" in answer["message"] and "Do not call refund_order again" in answer["message"]
        assert mock.effects()["by_intent_key"] == {"acme/refund_order:refund:small-1:20.00": 1}

        decided = decide(held_gateway, "big-1", "approve", "checked the order")
        # A client-executed tool runs in the caller's code: at its next call.
        assert decided["runs"] == "at_next_call", decided
        ran = refund_order("big-1", Decimal("150.00"))
        again = refund_order("big-1", Decimal("150.00"))

    assert ran["status"] == "done", ran
    assert again["status"] == "already_done" and again["result"]["id"] == ran["result"]["id"]
    assert mock.effects()["by_intent_key"] == {
        "acme/refund_order:refund:small-1:20.00": 1,
        "acme/refund_order:refund:big-1:150.00": 1,
    }


def test_a_denied_refund_is_rejected_with_the_reason_and_never_runs(mock: Mock, held_gateway: Gateway) -> None:
    with intentgate.Client(held_gateway.url, AGENT_KEY, timeout=30) as client:
        refund_order = refund_tool(client, mock.url)
        first = refund_order("big-2", Decimal("250.00"))
        assert first["status"] == "awaiting_approval", first
        decide(held_gateway, "big-2", "deny", "refunded by hand already")
        answers = [refund_order("big-2", Decimal("250.00")) for _ in range(2)]

    for answer in answers:
        assert answer["status"] == "rejected" and answer["reason"] == "denied", answer
        assert "refunded by hand already" in answer["message"], answer
    assert mock.effects()["total"] == 0
