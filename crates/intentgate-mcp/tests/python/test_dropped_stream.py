"""A client that gives up on a call (a read timeout, a dropped response stream) and
re-issues it with a new request id, as the MCP spec tells clients to, gets the same answer
and causes no second effect: the first call was never cancelled inside the gateway."""

import http.client
import json
import urllib.parse

import pytest
from mcp import MCPError

from support import ERAS, http_json, outcome_of, refund

# The provider takes this long per refund, so a call is surely in flight when dropped.
PROVIDER_LATENCY_MS = 400
# The client's patience for the first call: far less than the provider's latency.
IMPATIENT_SECONDS = 0.1


def assert_same_answer(reissued: dict, repeat: dict) -> None:
    # The first call was still running when the re-issued one arrived: the re-issued call
    # waited for it and got its result. A `done` here would mean the first call was lost
    # and the refund made again by the re-issued one.
    assert reissued["status"] == "already_done", reissued
    assert repeat["status"] == "already_done", repeat
    assert reissued["external_id"].startswith("re_")
    assert (repeat["external_id"], repeat["result"]) == (reissued["external_id"], reissued["result"])


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_a_call_given_up_by_the_client_keeps_its_intent_and_a_reissued_call_gets_its_answer(gateway, era):
    # The SDK abandons the request at its read timeout: over stdio it sends
    # notifications/cancelled, over Streamable HTTP it drops the response stream.
    gateway.mock.faults(latency_p50_ms=PROVIDER_LATENCY_MS, latency_p95_ms=PROVIDER_LATENCY_MS)
    async with gateway.connect(era) as client:
        with pytest.raises(MCPError):
            await client.call_tool("refund_order", refund("drop-1"), read_timeout_seconds=IMPATIENT_SECONDS)
        reissued = outcome_of(await client.call_tool("refund_order", refund("drop-1")))
        repeat = outcome_of(await client.call_tool("refund_order", refund("drop-1")))
    assert_same_answer(reissued, repeat)
    assert gateway.mock.effects()["by_order"] == {"drop-1": 1}


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["http"])
async def test_a_response_stream_closed_by_the_client_does_not_lose_the_call(gateway):
    # The lowest level a client can give up at: it sends tools/call, reads the response
    # head of the stream, and closes the connection before any event arrives.
    gateway.mock.faults(latency_p50_ms=PROVIDER_LATENCY_MS, latency_p95_ms=PROVIDER_LATENCY_MS)
    address = urllib.parse.urlsplit(gateway.url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "refund_order", "arguments": refund("drop-2")},
    }
    connection.request(
        "POST",
        "/mcp",
        body=json.dumps(request),
        headers={
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-11-25",
        },
    )
    response = connection.getresponse()
    assert response.status == 200
    assert response.getheader("content-type").startswith("text/event-stream")
    connection.close()

    async with gateway.connect() as client:
        reissued = outcome_of(await client.call_tool("refund_order", refund("drop-2")))
        repeat = outcome_of(await client.call_tool("refund_order", refund("drop-2")))
    assert_same_answer(reissued, repeat)
    assert gateway.mock.effects()["by_order"] == {"drop-2": 1}
    intent = http_json("GET", f"{gateway.url}/v1/intents/refund_order/refund:drop-2:25.00")
    assert (intent["status"], intent["external_id"]) == ("done", reissued["external_id"]), intent
