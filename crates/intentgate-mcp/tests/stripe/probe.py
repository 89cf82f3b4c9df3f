"""Probes whether the official Stripe MCP server can be pointed at a loopback API.

Run by hand after install.sh (see README.md beside this file):

    target/stripe-probe/venv/bin/python crates/intentgate-mcp/tests/stripe/probe.py \
        [--mock-provider PATH_TO_INTENTGATE]

It starts a loopback HTTP listener that logs every request (method, path, headers, body)
and answers a few Stripe-shaped objects, then drives @stripe/mcp over stdio with the
official Python MCP client and a fake key, in four runs:

1. @stripe/mcp 0.3.3 with every base-changing environment variable pointed at the
   listener: does anything reach it?
2. @stripe/mcp 0.2.5 with the same variables: does anything reach it?
3. @stripe/mcp 0.2.5 with base_shim.cjs preloaded (host/port/protocol forced into the
   stripe Node SDK): the tools, one read and create_refund twice with the same arguments,
   and the requests the listener saw.
4. With --mock-provider: run 3's create_refund against `intentgate mock-provider`.

Nothing here talks to Stripe; on a machine without outside network the default bases fail.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parents[4]
PROBE = ROOT / "target" / "stripe-probe"
SHIM = Path(__file__).resolve().parent / "base_shim.cjs"
FAKE_KEY = "sk_test_" + "0" * 24
CALL_TIMEOUT_S = 30


class Recorder(BaseHTTPRequestHandler):
    """Logs every request and answers Stripe-shaped JSON for the paths the probe uses."""

    log: list[dict] = []
    fail_next = 0

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        headers = {k: v for k, v in self.headers.items()}
        if "Authorization" in headers:
            headers["Authorization"] = headers["Authorization"][:15] + "..."
        Recorder.log.append(
            {"method": self.command, "path": self.path, "headers": headers, "body": body}
        )
        path = urllib.parse.urlsplit(self.path).path
        form = dict(urllib.parse.parse_qsl(body))
        if self.command == "POST" and Recorder.fail_next > 0:
            Recorder.fail_next -= 1
            status, answer = 500, {"error": {"type": "api_error", "message": "probe 500"}}
        elif self.command == "GET" and path == "/v1/customers":
            status, answer = 200, {
                "object": "list",
                "url": "/v1/customers",
                "has_more": False,
                "data": [{"id": "cus_probe1", "object": "customer", "email": "a@example.com"}],
            }
        elif self.command == "POST" and path == "/v1/refunds":
            number = sum(1 for r in Recorder.log if r["path"].startswith("/v1/refunds"))
            status, answer = 200, {
                "id": f"re_probe{number}",
                "object": "refund",
                "amount": int(form.get("amount", "0")),
                "currency": "usd",
                "payment_intent": form.get("payment_intent"),
                "status": "succeeded",
            }
        else:
            status, answer = 404, {
                "error": {"type": "invalid_request_error", "message": f"no route {path}"}
            }
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PUT = _handle

    def log_message(self, *_args) -> None:
        pass


def start_recorder() -> tuple[ThreadingHTTPServer, int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def base_env(port: int) -> dict[str, str]:
    """Every variable that could plausibly move the API base, all pointed at the listener."""
    loop = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env.update(
        {
            "STRIPE_SECRET_KEY": FAKE_KEY,
            "STRIPE_API_BASE": loop,
            "STRIPE_API_HOST": "127.0.0.1",
            "STRIPE_BASE_URL": loop,
            "STRIPE_MCP_URL": loop,
            "MCP_SERVER_URL": loop,
            "HTTPS_PROXY": loop,
            "HTTP_PROXY": loop,
            "https_proxy": loop,
            "http_proxy": loop,
            "NO_PROXY": "",
        }
    )
    return env


def server_params(version: str, args: list[str], env: dict[str, str]) -> StdioServerParameters:
    entry = PROBE / f"mcp-{version}" / "node_modules" / "@stripe" / "mcp" / "dist" / "index.js"
    if not entry.exists():
        sys.exit(f"{entry} is missing: run crates/intentgate-mcp/tests/stripe/install.sh first")
    return StdioServerParameters(command="node", args=[str(entry), *args], env=env)


def describe(error: BaseException) -> str:
    """The innermost errors of an exception group, in words."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(describe(e) for e in error.exceptions)
    if isinstance(error, TimeoutError):
        return f"no answer within {CALL_TIMEOUT_S} s"
    return f"{type(error).__name__}: {error}"[:300]


def show(title: str) -> None:
    print(f"\n=== {title}")


def text_of(result) -> str:
    parts = [c.text for c in result.content if getattr(c, "type", "") == "text"]
    return " ".join(parts) + ("  [isError]" if result.is_error else "")


async def session_run(params: StdioServerParameters, body, errlog) -> None:
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write) as session:
            with anyio.fail_after(CALL_TIMEOUT_S):
                init = await session.initialize()
            print(f"server: {init.server_info.name} {init.server_info.version}, "
                  f"protocol {init.protocol_version}")
            await body(session)


async def list_tools(session: ClientSession) -> None:
    with anyio.fail_after(CALL_TIMEOUT_S):
        tools = (await session.list_tools()).tools
    print(f"{len(tools)} tools:")
    for tool in tools:
        a = tool.annotations
        hints = (
            f"readOnly={a.read_only_hint} idempotent={a.idempotent_hint} "
            f"destructive={a.destructive_hint}" if a else "no annotations"
        )
        print(f"  {tool.name:32} {hints}  args={sorted(tool.input_schema.get('properties', {}))}")


async def call(session: ClientSession, name: str, arguments: dict, meta=None) -> None:
    with anyio.fail_after(CALL_TIMEOUT_S):
        result = await session.call_tool(name, arguments, meta=meta)
    shown = json.dumps(arguments) + (f", _meta={json.dumps(meta)}" if meta else "")
    print(f"{name}({shown}) -> {text_of(result)}")


def print_log(since: int) -> None:
    seen = Recorder.log[since:]
    print(f"listener saw {len(seen)} request(s)")
    for r in seen:
        print(f"  {r['method']} {r['path']}")
        for k in ("Idempotency-Key", "Content-Type", "Stripe-Version", "User-Agent"):
            if k in r["headers"]:
                print(f"    {k}: {r['headers'][k]}")
        if r["body"]:
            print(f"    body: {r['body']}")


async def run_unshimmed(version: str, args: list[str], port: int, errpath: Path) -> None:
    show(f"@stripe/mcp {version}, base-changing variables pointed at 127.0.0.1:{port}")
    since = len(Recorder.log)

    async def body(session: ClientSession) -> None:
        await list_tools(session)
        await call(session, "create_refund", {"payment_intent": "pi_probe", "amount": 100})

    with errpath.open("w") as errlog:
        try:
            await session_run(server_params(version, args, base_env(port)), body, errlog)
        except Exception as error:  # noqa: BLE001 - the probe reports every failure
            print(f"failed: {describe(error)}")
    tail = [l for l in errpath.read_text().splitlines() if l.strip()][-6:]
    print("server stderr (last lines):")
    for line in tail:
        print(f"  {line[:200]}")
    print_log(since)


async def run_shimmed(host_port: tuple[str, int], label: str, list_first: bool) -> None:
    host, port = host_port
    show(f"@stripe/mcp 0.2.5 + base_shim.cjs -> http://{host}:{port} ({label})")
    env = base_env(port)
    env.update(
        {
            "STRIPE_PROBE_HOST": host,
            "STRIPE_PROBE_PORT": str(port),
            "NODE_OPTIONS": f"--require {SHIM}",
        }
    )
    since = len(Recorder.log)

    async def body(session: ClientSession) -> None:
        if list_first:
            await list_tools(session)
            await call(session, "list_customers", {"limit": 1})
        for _ in range(2):
            await call(session, "create_refund", {"payment_intent": "pi_probe", "amount": 100})
        if list_first:
            # Is there anywhere to put a caller's key? An extra argument, then _meta.
            await call(
                session,
                "create_refund",
                {"payment_intent": "pi_probe", "amount": 100, "idempotency_key": "intent-1"},
            )
            await call(
                session,
                "create_refund",
                {"payment_intent": "pi_probe", "amount": 100},
                meta={"idempotency_key": "intent-2"},
            )
            # How the SDK retries: the listener answers the next POST with a 500.
            Recorder.fail_next = 1
            await call(session, "create_refund", {"payment_intent": "pi_fail", "amount": 100})

    with open(os.devnull, "w") as errlog:
        await session_run(server_params("0.2.5", ["--tools=all"], env), body, errlog)
    if label == "recorder":
        print_log(since)


def start_mock_provider(binary: str) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "mock-provider", "--listen", f"127.0.0.1:{port}", "--faults", "quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit("mock provider did not start")


def mock_refunds(port: int) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/refunds") as r:
        return r.read().decode()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mock-provider", help="path of an intentgate binary")
    opts = parser.parse_args()

    server, port = start_recorder()
    logs = PROBE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    await run_unshimmed("0.3.3", [], port, logs / "mcp-0.3.3.stderr")
    await run_unshimmed("0.2.5", ["--tools=all"], port, logs / "mcp-0.2.5.stderr")
    await run_shimmed(("127.0.0.1", port), "recorder", list_first=True)

    if opts.mock_provider:
        proc, mock_port = start_mock_provider(opts.mock_provider)
        try:
            await run_shimmed(("127.0.0.1", mock_port), "intentgate mock-provider", False)
            print(f"mock provider GET /v1/refunds: {mock_refunds(mock_port)}")
        finally:
            proc.kill()
            proc.wait()
    server.shutdown()


if __name__ == "__main__":
    anyio.run(main)
