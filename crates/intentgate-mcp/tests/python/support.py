"""Helpers of the MCP acceptance tests: the real `intentgate` processes, the mock
provider's admin API, and the checks every test makes on a tool result.

Run the tests with `INTENTGATE_BIN` pointing at the binary, or after `cargo build` from the
repository root (they use `target/debug/intentgate`).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import urllib.request

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

REPOSITORY = pathlib.Path(__file__).resolve().parents[4]
BINARY = pathlib.Path(os.environ.get("INTENTGATE_BIN", REPOSITORY / "target" / "debug" / "intentgate"))
EXAMPLE_CONFIG = REPOSITORY / "examples" / "support-agent.yaml"

# Tool timeouts in the test config: short, so a timed-out upstream call costs under a second.
TOOL_TIMEOUT_MS = 700
# How long the mock holds a "timeout" answer: well past the tool timeout.
TIMEOUT_HOLD_MS = 2000
# Longest wait for a process to print where it listens, or to stop, or for an admin call.
PROCESS_WAIT_SECONDS = 15
# The SDK's connect mode for each protocol era: 2026-07-28 is negotiated with
# `server/discover` (stateless), 2025-11-25 with the `initialize` handshake.
CLIENT_MODES = {"2026-07-28": "auto", "2025-11-25": "legacy"}
ERAS = list(CLIENT_MODES)


def http_json(method: str, url: str, body: object | None = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=PROCESS_WAIT_SECONDS) as response:
        return json.load(response)


class Process:
    """A child `intentgate` process that prints `... listening on http://ADDR` first."""

    def __init__(self, args: list[str], env: dict[str, str], log: pathlib.Path):
        assert BINARY.exists(), f"{BINARY} is missing: run `cargo build` first, or set INTENTGATE_BIN"
        self.process = subprocess.Popen(
            [str(BINARY), *args],
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            env={**os.environ, **env},
            text=True,
        )
        line = self.process.stdout.readline()
        assert " listening on http://" in line, f"unexpected first line {line!r}; see {log}"
        self.url = line.strip().rsplit(" ", 1)[-1]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(PROCESS_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Mock:
    """The mock payments provider (`intentgate mock-provider`), with its admin API."""

    def __init__(self, folder: pathlib.Path):
        self.process = Process(["mock-provider", "--listen", "127.0.0.1:0", "--faults", "quiet"], {}, folder / "mock.log")
        self.url = self.process.url

    def faults(self, **plan: int) -> None:
        """Replaces the fault plan: no latency and the tests' timeout hold, then `plan`."""
        full = {"latency_p50_ms": 0, "latency_p95_ms": 0, "retry_after_ms": 10, "timeout_hold_ms": TIMEOUT_HOLD_MS}
        full.update(plan)
        http_json("PUT", f"{self.url}/admin/faults", full)

    def effects(self) -> dict:
        """`{"total", "by_intent_key", "duplicates", "by_order"}`: the effects that happened."""
        return http_json("GET", f"{self.url}/admin/effects")

    def stats(self) -> dict:
        """`{"requests", "lookups", "reads", "effects"}`: what the provider was asked."""
        return http_json("GET", f"{self.url}/admin/stats")

    def stop(self) -> None:
        self.process.stop()


def write_test_config(folder: pathlib.Path) -> pathlib.Path:
    """The example config with short tool timeouts."""
    lines = []
    for line in EXAMPLE_CONFIG.read_text().splitlines():
        if line.lstrip().startswith("timeout_ms:"):
            indent = line[: len(line) - len(line.lstrip())]
            line = f"{indent}timeout_ms: {TOOL_TIMEOUT_MS}"
        lines.append(line)
    path = folder / "support-agent.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


class Gateway:
    """intentgate on one transport, in front of the mock:

    - `stdio`: the SDK starts `intentgate mcp --config ...` as its child, per connection;
    - `http`: `intentgate serve --config ...` runs here and the SDK connects to `/mcp`.

    Every connection of one gateway shares its SQLite ledger.
    """

    def __init__(self, transport: str, mock: Mock, folder: pathlib.Path):
        self.transport = transport
        self.mock = mock
        self.folder = folder
        config = write_test_config(folder)
        # The example config keeps send_email's sensitive arguments as keyed hashes; the key
        # comes from the environment, which the stdio client does not pass through.
        self.env = {
            "INTENTGATE_MOCK_URL": mock.url,
            "INTENTGATE_HASH_KEY": "0123456789abcdef0123456789abcdef-mcp-tests",
            "RUST_LOG": "warn",
        }
        self.args = ["--config", str(config), "--ledger", str(folder / "ledger.db"), "--durability", "relaxed"]
        self.server: Process | None = None
        if transport == "http":
            self.server = Process(["serve", "--listen", "127.0.0.1:0", *self.args], self.env, folder / "serve.log")

    @property
    def url(self) -> str:
        assert self.server is not None, "only the http transport has a URL"
        return self.server.url

    def connect(self, era: str = "2026-07-28") -> Client:
        """An SDK client of protocol era `era`, to use with `async with`."""
        mode = CLIENT_MODES[era]
        if self.server is not None:
            return Client(f"{self.server.url}/mcp", mode=mode)
        parameters = StdioServerParameters(command=str(BINARY), args=["mcp", *self.args], env=self.env)
        errlog = (self.folder / "mcp.log").open("a")
        return Client(stdio_client(parameters, errlog=errlog), mode=mode)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def refund(order_id: str, amount: float = 25.0) -> dict:
    return {"order_id": order_id, "amount": amount, "reason": "requested_by_customer"}


def outcome_of(result) -> dict:
    """The outcome object of a tool result, checked to be both the structured content and
    the text, each starting with `status` (the SDK's dict keeps the order of the wire)."""
    assert result.structured_content is not None, result
    texts = [block.text for block in result.content if block.type == "text"]
    assert len(texts) == 1 and json.loads(texts[0]) == result.structured_content, result
    assert next(iter(result.structured_content)) == "status", result.structured_content
    assert texts[0].startswith('{"status":'), texts[0]
    keys = list(result.structured_content)
    if "result" in keys:
        assert keys.index("message") < keys.index("result"), keys
    return result.structured_content
