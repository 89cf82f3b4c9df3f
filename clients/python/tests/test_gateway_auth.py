"""The client with API keys against the real gateway: the key is sent as a bearer token,
and the gateway's refusals arrive as `IntentGateError` with the problem's fields."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from decimal import Decimal

import pytest

import intentgate
from processes import Gateway, Mock, refund_tool

AGENT_KEY = "igk_test_agent_0123456789abcdef0123456789abcdef"
READER_KEY = "igk_test_reader_0123456789abcdef0123456789abcdef"
OTHER_TENANT_KEY = "igk_test_other_0123456789abcdef0123456789abcdef"


@pytest.fixture
def keyed_gateway(tmp_path: pathlib.Path, mock: Mock) -> Iterator[Gateway]:
    folder = tmp_path / "keyed"
    folder.mkdir()
    gateway = Gateway(
        folder,
        api_keys=[
            ("support-agent", AGENT_KEY, "acme", "call"),
            ("support-reader", READER_KEY, "acme", "call, intents:read"),
            ("other-agent", OTHER_TENANT_KEY, "globex", "call, intents:read"),
        ],
    )
    yield gateway
    gateway.stop()


def test_api_keys_and_the_problems_of_refused_requests(mock: Mock, keyed_gateway: Gateway) -> None:
    url = keyed_gateway.url
    with intentgate.Client(url) as anonymous:
        with pytest.raises(intentgate.IntentGateError) as refused:
            anonymous.grant("refund_order", {"order_id": "keyed-1", "amount": "4.00"})
    assert refused.value.status == 401
    assert refused.value.type.startswith("urn:intentgate:problem:") and refused.value.detail
    assert refused.value.problem["status"] == 401

    with intentgate.Client(url, AGENT_KEY) as agent, intentgate.Client(url, READER_KEY) as reader:
        outcome = refund_tool(agent, mock.url)("keyed-1", Decimal("4.00"))
        assert outcome["status"] == "done", outcome

        grant = agent.grant("refund_order", {"order_id": "keyed-2", "amount": "4.00"})
        assert grant["action"] == "execute"
        # Reading an intent needs the intents:read scope.
        with pytest.raises(intentgate.IntentGateError) as forbidden:
            agent.intent(grant["intent_id"])
        assert forbidden.value.status == 403
        assert reader.intent(grant["intent_id"])["status"] == "in_flight"
        # An unknown outcome kind is refused with a 4xx that says what is wrong.
        with pytest.raises(intentgate.IntentGateError) as malformed:
            agent.settle(grant["intent_id"], grant["lease"]["token"], "finished")
        assert 400 <= malformed.value.status < 500 and malformed.value.detail
        assert agent.settle(grant["intent_id"], grant["lease"]["token"], "not_executed", reason="changed my mind")["outcome"]["status"] == "not_executed"

    # Another tenant's caller is told the intent doesn't exist.
    with intentgate.Client(url, OTHER_TENANT_KEY) as other:
        with pytest.raises(intentgate.IntentGateError) as hidden:
            other.intent(grant["intent_id"])
        assert hidden.value.status == 404
