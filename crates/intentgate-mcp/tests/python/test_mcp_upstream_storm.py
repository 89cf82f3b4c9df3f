"""The retry storm through `intentgate serve` in front of an MCP upstream: the refund server
of crates/intentgate-mcp-upstream/tests/python (the official SDK's high-level server), run by
the gateway over stdio or by the test over Streamable HTTP, with faults injected per order:
rate limits (an `isError` result that says "not processed"), a reply lost after the effect, a
slow reply past the timeout, the process dying after the effect or before it, the process
killed from outside mid-call, and refusals. Every call is repeated by the four layers of an
agent: the model repeats it, the agent framework retries it, the HTTP client retries it, and
the user asks again. The server counts its own effects; once the storm is over, every intent
must settle, with exactly one effect per refund that was made and none for the refused.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time

import anyio
import pytest
from mcp import Client

from support import PROCESS_WAIT_SECONDS, REPOSITORY, Process, outcome_of

REFUND_SERVER = REPOSITORY / "crates" / "intentgate-mcp-upstream" / "tests" / "python" / "refund_server.py"

# The orders of the storm by the server's behaviour (the prefix of the order id; see
# refund_server.py): plain ones, one per transient fault, and a refusal that never changes.
KINDS = {
    "plain": 2,
    "ratelimit": 2,
    "slow": 2,
    "lost": 2,
    "die": 1,
    "crash": 1,
    "refuse": 1,
}
# The transient faults, each firing at most this many times per order (so the storm
# converges); every one of them must have fired by the time the intents settle.
TRANSIENT = ["ratelimit", "slow", "lost", "die", "crash"]
FAULTS_PER_ORDER = 2
# How many copies of one request each layer makes, and how long after its first copy each
# later copy leaves: the model repeats the call, the framework retries after its own timeout,
# the HTTP client retries at once. Each ask of the user makes MODEL x FRAMEWORK x HTTP calls.
MODEL_REPEATS, MODEL_PAUSE_SECONDS = 3, 0.15
FRAMEWORK_RETRIES, FRAMEWORK_PAUSE_SECONDS = 2, 0.5
HTTP_RETRIES, HTTP_PAUSE_SECONDS = 3, 0.05
# The user asks twice during the storm (a new conversation each time), then again after the
# storm until every intent is settled.
USER_ASKS = 2
CALLS_PER_INTENT = USER_ASKS * MODEL_REPEATS * FRAMEWORK_RETRIES * HTTP_RETRIES
# The server is killed from outside this many times during the storm, this far apart.
KILLS = 2
KILL_PAUSE_SECONDS = 1.5
# How often, and how long at most, the killer looks for a running server while it is being
# started again (a Python server takes seconds to start on a loaded machine).
KILL_POLL_SECONDS = 0.1
KILL_WAIT_SECONDS = 60
# The refund tool's timeout: past it a call is ambiguous and goes to the lookup. The slow
# reply (3 s) and the lost one are past it.
TOOL_TIMEOUT_MS = 1000
# Statuses a call may get during the storm; `rejected` only for a refused order.
STORM_STATUSES = {"done", "already_done", "pending_unknown", "not_executed", "rejected"}
# How each kind of order must end, once settled.
FINAL = {"refuse": {"rejected"}}
MADE = {"done", "already_done"}
# Liveness: every intent settles within this long after the storm, the user asking
# again every FOLLOW_UP_PAUSE_SECONDS while it is pending.
SETTLE_SECONDS_MAX = 60
FOLLOW_UP_PAUSE_SECONDS = 1.0
# Longest a storm may take before the test fails instead of hanging.
STORM_SECONDS_MAX = 120


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def refund(order_id: str) -> dict:
    return {"order_id": order_id, "amount": 25.5}


def kind_of(order_id: str) -> str:
    return order_id.split("-", 1)[0]


class RefundServer:
    """The refund server's files: its effects by key (`effects.json`), the faults it fired
    (`faults.json`), its process id and how many times it started. Over HTTP the test starts
    it, and starts it again whenever it exits, as a supervisor would."""

    def __init__(self, folder: pathlib.Path, transport: str):
        self.folder = folder
        self.state = folder / "effects.json"
        self.env = {"REFUND_STATE": str(self.state), "REFUND_FAULTS_PER_ORDER": str(FAULTS_PER_ORDER)}
        self.url: str | None = None
        self.process: subprocess.Popen | None = None
        self.stopping = threading.Event()
        self.supervisor: threading.Thread | None = None
        if transport == "http":
            port = free_port()
            self.url = f"http://127.0.0.1:{port}/mcp"
            self.env["REFUND_HTTP_PORT"] = str(port)
            self.start()
            deadline = time.monotonic() + PROCESS_WAIT_SECONDS
            while not self.listening(port):
                assert time.monotonic() < deadline, f"the refund server did not listen on {port}"
                time.sleep(0.05)
            self.supervisor = threading.Thread(target=self.supervise, daemon=True)
            self.supervisor.start()

    def start(self) -> None:
        log = (self.folder / "refund_server.log").open("a")
        self.process = subprocess.Popen(
            [sys.executable, str(REFUND_SERVER)], env={**os.environ, **self.env}, stdout=log, stderr=log
        )

    @staticmethod
    def listening(port: int) -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    def supervise(self) -> None:
        while not self.stopping.is_set():
            if self.process.poll() is not None:
                self.start()
            time.sleep(0.05)

    def effects(self) -> dict:
        return json.loads(self.state.read_text()) if self.state.exists() else {}

    def effects_by_order(self) -> collections.Counter:
        """How many refunds the server made per order: a replayed key makes none."""
        made = collections.Counter()
        for record in self.effects().values():
            made[record["order_id"]] += record["effects"]
        return made

    def faults_fired(self) -> collections.Counter:
        path = self.folder / "faults.json"
        fired = collections.Counter()
        for name, count in (json.loads(path.read_text()) if path.exists() else {}).items():
            fired[name.split(":", 1)[0]] += count
        return fired

    def starts(self) -> int:
        return int((self.folder / "starts").read_text())

    def kill(self) -> bool:
        """SIGKILL to the running server, whatever call it is in; false if none runs."""
        try:
            pid = int((self.folder / "pid").read_text())
            command = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return False
        if REFUND_SERVER.name.encode() not in command:
            return False
        os.kill(pid, signal.SIGKILL)
        return True

    def stop(self) -> None:
        self.stopping.set()
        if self.supervisor is not None:
            self.supervisor.join()
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def write_config(folder: pathlib.Path, server: RefundServer) -> pathlib.Path:
    """One side-effecting tool, `refund_order`, calling the server's refund tool: over stdio
    with the key in `_meta` (`refund_meta`), over HTTP with the key as an argument."""
    if server.url is None:
        upstream = {"kind": "mcp", "command": sys.executable, "args": [str(REFUND_SERVER)], "env": server.env}
        call = {"upstream": "refunds", "tool": "refund_meta"}
    else:
        upstream = {"kind": "mcp", "url": server.url}
        call = {"upstream": "refunds", "tool": "refund", "idempotency_key_argument": "idempotency_key"}
    upstream.update({"timeout_ms": TOOL_TIMEOUT_MS, "honours_idempotency_keys": True, "key_window_hours": 24})
    call.update(
        {
            "arguments": {"order_id": "{order_id}", "amount": "{amount}"},
            "not_processed": ["rate limit"],
            "result": {"external_id": "/id"},
        }
    )
    config = {
        "upstreams": {"refunds": upstream},
        # Unknown intents are looked up again soon, so they settle within the test.
        "resolution": {"backoff_initial_ms": 200, "backoff_max_ms": 2000, "resends_per_second": 50},
        "tools": [
            {
                "name": "refund_order",
                "description": "Refund an order, once per order and amount.",
                "effect": "side_effect",
                "input_schema": {
                    "type": "object",
                    "properties": {
                        "order_id": {"type": "string", "minLength": 1, "maxLength": 64},
                        "amount": {"type": "number", "exclusiveMinimum": 0},
                    },
                    "required": ["order_id", "amount"],
                    "additionalProperties": False,
                },
                "key": "refund:{order_id}:{amount:.2}",
                "timeout_ms": TOOL_TIMEOUT_MS,
                "retry_budget": 1,
                "retry_rejected": False,
                "call": call,
                "lookup": {
                    "tool": "find_refund",
                    "arguments": {"order_id": "{order_id}"},
                    "found": "/refund",
                    "key": "/idempotency_key",
                    "external_id": "/id",
                },
            }
        ],
    }
    path = folder / "refunds.yaml"
    # JSON is YAML.
    path.write_text(json.dumps(config, indent=2))
    return path


@pytest.fixture(params=["stdio", "http"])
def upstream(request, tmp_path):
    folder = tmp_path / "refunds"
    folder.mkdir()
    server = RefundServer(folder, request.param)
    yield server
    server.stop()


@pytest.fixture
def serve(upstream, tmp_path):
    config = write_config(tmp_path, upstream)
    args = ["--config", str(config), "--ledger", str(tmp_path / "ledger.db"), "--durability", "relaxed"]
    process = Process(["serve", "--listen", "127.0.0.1:0", *args], {"RUST_LOG": "warn"}, tmp_path / "serve.log")
    yield process
    process.stop()


async def ask(url: str, orders: list[str], told: dict[str, collections.Counter]) -> None:
    """One ask of the user for every order, in a new conversation, each call copied by the
    model, the framework and the HTTP client."""

    async def one(client: Client, order: str, delay: float) -> None:
        await anyio.sleep(delay)
        outcome = outcome_of(await client.call_tool("refund_order", refund(order)))
        told[order][outcome["status"]] += 1

    async with Client(url) as client:
        async with anyio.create_task_group() as group:
            for order in orders:
                for model in range(MODEL_REPEATS):
                    for framework in range(FRAMEWORK_RETRIES):
                        for http in range(HTTP_RETRIES):
                            delay = (
                                model * MODEL_PAUSE_SECONDS
                                + framework * FRAMEWORK_PAUSE_SECONDS
                                + http * HTTP_PAUSE_SECONDS
                            )
                            group.start_soon(one, client, order, delay)


async def kill_repeatedly(server: RefundServer) -> int:
    """The server killed from outside KILLS times during the storm, each time once it runs
    again; how many kills hit."""
    kills = 0
    for _ in range(KILLS):
        await anyio.sleep(KILL_PAUSE_SECONDS)
        for _ in range(int(KILL_WAIT_SECONDS / KILL_POLL_SECONDS)):
            if server.kill():
                kills += 1
                break
            await anyio.sleep(KILL_POLL_SECONDS)
    return kills


async def settle(url: str, orders: list[str], told: dict[str, collections.Counter]) -> dict[str, dict]:
    """The user asks again about every order until its answer is final; the final outcomes."""
    final: dict[str, dict] = {}
    last: dict[str, str] = {}
    pending = list(orders)
    async with Client(url) as client:
        with anyio.move_on_after(SETTLE_SECONDS_MAX):
            while pending:
                for order in list(pending):
                    outcome = outcome_of(await client.call_tool("refund_order", refund(order)))
                    told[order][outcome["status"]] += 1
                    last[order] = outcome["status"]
                    if outcome["status"] in FINAL.get(kind_of(order), MADE):
                        final[order] = outcome
                        pending.remove(order)
                if pending:
                    await anyio.sleep(FOLLOW_UP_PAUSE_SECONDS)
    unsettled = {order: last.get(order) for order in pending}
    assert unsettled == {}, f"not settled {SETTLE_SECONDS_MAX} s after the storm: {unsettled}"
    return final


@pytest.mark.anyio
async def test_the_retry_storm_against_a_faulty_mcp_server_makes_one_refund_per_intent(upstream, serve):
    url = f"{serve.url}/mcp"
    orders = [f"{kind}-{n}" for kind, count in KINDS.items() for n in range(count)]
    told: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    kills = 0

    async def killer() -> None:
        nonlocal kills
        kills = await kill_repeatedly(upstream)

    began = time.monotonic()
    with anyio.fail_after(STORM_SECONDS_MAX):
        async with anyio.create_task_group() as group:
            group.start_soon(killer)
            for _ in range(USER_ASKS):
                await ask(url, orders, told)
    storm_calls = sum(sum(counter.values()) for counter in told.values())
    assert storm_calls == len(orders) * CALLS_PER_INTENT, told
    assert kills == KILLS, kills

    # The storm is over and nobody kills the server any more. A fault that has not fired its
    # bounded number of times yet may still fire while the intents settle.
    stormed = time.monotonic()
    final = await settle(url, orders, told)
    settled = time.monotonic()
    # The faults were met: each one fired (every faulty order reached the server before it
    # was done), and the server was started again.
    fired = upstream.faults_fired()
    assert all(fired[fault] >= 1 for fault in TRANSIENT), fired
    assert upstream.starts() > 1 + KILLS, upstream.starts()

    made = upstream.effects_by_order()
    statuses = collections.Counter()
    misreported = []
    for order in orders:
        statuses.update(told[order])
        assert set(told[order]) <= STORM_STATUSES, (order, told[order])
        has_effect = made[order] > 0
        # Told refused while the refund was made (or the server never refused it), or told
        # made while it was not. (`not_executed` during the storm is true of its attempt: a
        # later call may make the refund.)
        if told[order]["rejected"] and (has_effect or kind_of(order) != "refuse"):
            misreported.append((order, "rejected", made[order]))
        if (told[order]["done"] or told[order]["already_done"]) and not has_effect:
            misreported.append((order, "done", made[order]))
    duplicates = {order: count for order, count in made.items() if count > 1}
    assert duplicates == {}, duplicates
    assert misreported == [], misreported
    expected_effects = {order: 0 if kind_of(order) in FINAL else 1 for order in orders}
    assert {order: made[order] for order in orders} == expected_effects, made
    # Only intents of the storm, and each done one answered with the server's own refund id.
    assert set(made) <= set(orders), made
    records = {record["order_id"]: record for record in upstream.effects().values()}
    for order, outcome in final.items():
        if outcome["status"] in MADE:
            assert outcome["external_id"] == records[order]["id"], (order, outcome)

    calls = sum(statuses.values())
    per_intent = sorted(set(made[order] for order in orders if kind_of(order) not in FINAL))
    print(
        f"mcp upstream over {'http' if upstream.url else 'stdio'}: {len(orders)} intents, {calls} calls "
        f"({storm_calls} in the storm), effects per made intent {per_intent}, duplicates 0, misreported 0, "
        f"refused with 0 effects {sum(1 for order in orders if kind_of(order) in FINAL)}, "
        f"statuses {dict(statuses)}, faults fired {dict(fired)}, kills {kills}, server starts {upstream.starts()}, "
        f"storm {stormed - began:.1f} s, settled {settled - stormed:.1f} s after it"
    )
