"""The kill switch over MCP: a tool switched off or on with the `intentgate flags` command,
on the ledger the gateway uses, while an MCP client is connected.

Over stdio the client is told (`notifications/tools/list_changed`, within about a second:
the gateway reads the flags every 500 ms); a new tools/list then marks the tool, and a call
returns status `disabled` with nothing sent to the provider. The stateless Streamable HTTP
endpoint has no standing connection to notify: its clients see the change at their next
tools/list."""

from __future__ import annotations

import subprocess
import time

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from support import BINARY, ERAS, CLIENT_MODES, PROCESS_WAIT_SECONDS, Gateway, outcome_of, refund

# Longest wait for a switch to reach the client. The gateway reads the flags every 500 ms;
# the margin is for a loaded CI machine, not a looser promise.
NOTIFIED_WITHIN_SECONDS = 5
SWITCHED_OFF_START = "Switched off right now: a call does nothing and returns status `disabled`."


def run_flags(gateway: Gateway, *args: str) -> subprocess.CompletedProcess:
    """`intentgate flags ARGS` on the gateway's config and ledger; fails the test if it fails."""
    config, ledger = gateway.args[1], gateway.args[3]
    done = subprocess.run(
        [str(BINARY), "flags", *args, "--config", config, "--ledger", ledger],
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT_SECONDS,
    )
    assert done.returncode == 0, done
    return done


class Notifications:
    """Counts the `notifications/tools/list_changed` a client receives."""

    def __init__(self) -> None:
        self.tools_list_changed = 0
        self.changed = anyio.Event()

    async def handle(self, message) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.tools_list_changed += 1
            self.changed.set()

    async def wait(self, count: int) -> float:
        """Waits until `count` notifications have arrived; seconds waited."""
        started = time.monotonic()
        with anyio.fail_after(NOTIFIED_WITHIN_SECONDS):
            while self.tools_list_changed < count:
                self.changed = anyio.Event()
                await self.changed.wait()
        return time.monotonic() - started


def stdio_client_of(gateway: Gateway, era: str, notifications: Notifications) -> Client:
    parameters = StdioServerParameters(command=str(BINARY), args=["mcp", *gateway.args], env=gateway.env)
    errlog = (gateway.folder / "mcp.log").open("a")
    return Client(
        stdio_client(parameters, errlog=errlog),
        mode=CLIENT_MODES[era],
        message_handler=notifications.handle,
    )


@pytest.fixture
def stdio_gateway(mock, tmp_path):
    gateway = Gateway("stdio", mock, tmp_path)
    yield gateway
    gateway.stop()


@pytest.fixture
def http_gateway(mock, tmp_path):
    gateway = Gateway("http", mock, tmp_path)
    yield gateway
    gateway.stop()


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_a_stdio_client_is_told_when_a_tool_is_switched_off_and_on(stdio_gateway, mock, era):
    notifications = Notifications()
    async with stdio_client_of(stdio_gateway, era, notifications) as client:
        assert client.server_capabilities.tools.list_changed is True
        before = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert not before["refund_order"].description.startswith(SWITCHED_OFF_START)
        done = outcome_of(await client.call_tool("refund_order", refund("before")))
        assert done["status"] == "done", done

        run_flags(stdio_gateway, "disable", "refund_order", "--reason", "duplicate refunds", "--actor", "alice")
        waited = await notifications.wait(1)
        print(f"{era}: tools/list_changed arrived {waited:.2f} s after flags disable exited")

        after = {tool.name: tool for tool in (await client.list_tools()).tools}
        refund_tool = after["refund_order"]
        assert refund_tool.description.startswith(SWITCHED_OFF_START), refund_tool.description
        assert refund_tool.description.endswith(before["refund_order"].description)
        # Everything else stays: a tool switched back on comes back as it was.
        assert refund_tool.annotations == before["refund_order"].annotations
        assert refund_tool.input_schema == before["refund_order"].input_schema
        for name, tool in after.items():
            if name != "refund_order":
                assert tool == before[name], name

        requests = mock.stats()["requests"]
        refused = outcome_of(await client.call_tool("refund_order", refund("after")))
        assert refused["status"] == "disabled", refused
        assert mock.stats()["requests"] == requests, "nothing reached the provider"
        assert "after" not in mock.effects()["by_order"]

        run_flags(stdio_gateway, "enable", "refund_order", "--reason", "fixed")
        await notifications.wait(2)
        again = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert again["refund_order"] == before["refund_order"]
        resumed = outcome_of(await client.call_tool("refund_order", refund("after")))
        assert resumed["status"] == "done", resumed
    assert notifications.tools_list_changed == 2
    assert mock.effects()["total"] == 2


@pytest.mark.anyio
async def test_a_switch_of_a_tool_already_in_that_state_tells_no_one(stdio_gateway):
    notifications = Notifications()
    async with stdio_client_of(stdio_gateway, "2026-07-28", notifications) as client:
        await client.list_tools()
        run_flags(stdio_gateway, "enable", "refund_order")
        # Two flag reads later, still nothing: the set of switched-off tools did not change.
        await anyio.sleep(1.5)
        assert notifications.tools_list_changed == 0


@pytest.mark.anyio
async def test_an_http_client_sees_a_switch_at_its_next_tools_list(http_gateway):
    async with http_gateway.connect() as client:
        before = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert client.server_capabilities.tools.list_changed is True
    run_flags(http_gateway, "disable", "charge_card", "--reason", "card network outage")
    # A new client (or a new request: the endpoint is stateless) sees it within about a second.
    with anyio.fail_after(NOTIFIED_WITHIN_SECONDS):
        while True:
            async with http_gateway.connect() as client:
                tools = {tool.name: tool for tool in (await client.list_tools()).tools}
                if tools["charge_card"].description.startswith(SWITCHED_OFF_START):
                    break
            await anyio.sleep(0.1)
    assert tools["charge_card"].annotations == before["charge_card"].annotations
    async with http_gateway.connect() as client:
        refused = outcome_of(
            await client.call_tool(
                "charge_card",
                {"customer_id": "cus_1", "amount": 10.0, "currency": "usd"},
                meta={"intentgate/intent_id": "ci_flags_1"},
            )
        )
    assert refused["status"] == "disabled", refused
