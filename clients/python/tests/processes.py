"""The real parts of the integration tests: `intentgate mock-provider` and `intentgate
serve` as child processes on loopback ports, the mock's admin API, and the refund tool the
tests decorate (its body calls the mock's `POST /v1/refunds` with httpx; its lookup asks the
mock by key).

The functions here are importable by worker processes (`multiprocessing` with `spawn`), and
`python processes.py kill-worker ...` is the worker the kill test SIGKILLs.

Run with `INTENTGATE_BIN` pointing at the binary, or after `cargo build` from the repository
root (the default is `target/debug/intentgate`).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import time
from decimal import Decimal
from typing import Any

import httpx

import intentgate

REPOSITORY = pathlib.Path(__file__).resolve().parents[3]
BINARY = pathlib.Path(os.environ.get("INTENTGATE_BIN", REPOSITORY / "target" / "debug" / "intentgate"))
#: The repository's example config, whose `refund_order_sdk` is client-executed.
EXAMPLE_CONFIG = REPOSITORY / "examples" / "support-agent.yaml"

#: The package's examples (`examples/*.py`), run by the tests as a user runs them.
EXAMPLES = REPOSITORY / "clients" / "python" / "examples"
#: The hash key the gateway runs `EXAMPLE_CONFIG` with in the tests.
EXAMPLE_HASH_KEY = "0123456789abcdef0123456789abcdef-python-examples"

#: The refund tool's lease, in milliseconds: short, so an expired lease costs the kill and
#: expiry tests about a second and a half. The decorator renews it while the body runs.
LEASE_MS = 1500
#: How long the mock holds a "timeout" answer before cutting the connection.
TIMEOUT_HOLD_MS = 1500
#: The body's HTTP timeout for the provider: shorter than the hold, so a held request is a
#: client timeout (ambiguous), as with a real provider's p99.
PROVIDER_TIMEOUT_SECONDS = 0.5
#: The statuses below 500 after which a provider SDK's HTTP client sends a request again
#: (a 409 while the key is being processed, a 429), with `refund_tool(http_retries=...)`.
HTTP_RETRY_STATUSES = frozenset({409, 429})
#: Longest wait for a process to print where it listens, or to stop, or for an admin call.
PROCESS_WAIT_SECONDS = 15

CONFIG = f"""\
gateway:
  tenant: default
auth: none
tools:
  - name: refund_order
    description: Refund part or all of an order. Safe to call once per order; repeats return the first result.
    effect: side_effect
    executor: client
    key: "refund:{{order_id}}:{{amount:.2}}"
    timeout_ms: {LEASE_MS}
    key_window_hours: 24
    input_schema:
      type: object
      required: [order_id, amount]
      properties:
        order_id: {{type: string, minLength: 1, maxLength: 64}}
        amount: {{type: string, pattern: "^[0-9]+(\\\\.[0-9]{{1,2}})?$"}}
      additionalProperties: false
"""


class Process:
    """A child `intentgate` process that prints `... listening on http://ADDR` first."""

    def __init__(self, args: list[str], log: pathlib.Path, env: dict[str, str] | None = None) -> None:
        assert BINARY.exists(), f"{BINARY} is missing: run `cargo build -p intentgate` first, or set INTENTGATE_BIN"
        self.process = subprocess.Popen(
            [str(BINARY), *args],
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            env={**os.environ, "RUST_LOG": "warn", **(env or {})},
            text=True,
        )
        assert self.process.stdout is not None
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
    """The mock payments provider, with its admin API."""

    def __init__(self, folder: pathlib.Path) -> None:
        self.process = Process(["mock-provider", "--listen", "127.0.0.1:0", "--faults", "quiet"], folder / "mock.log")
        self.url = self.process.url
        self.http = httpx.Client(base_url=self.url, timeout=PROCESS_WAIT_SECONDS)
        self.faults()

    def faults(self, **plan: Any) -> None:
        """Replaces the fault plan: no latency and the tests' timeout hold, then `plan`."""
        full = {"latency_p50_ms": 0, "latency_p95_ms": 0, "retry_after_ms": 10, "timeout_hold_ms": TIMEOUT_HOLD_MS}
        full.update(plan)
        self.http.put("/admin/faults", json=full).raise_for_status()

    def effects(self) -> dict[str, Any]:
        """`{"total", "by_intent_key", "duplicates", "by_order"}`."""
        return self.http.get("/admin/effects").json()  # type: ignore[no-any-return]

    def stats(self) -> dict[str, Any]:
        return self.http.get("/admin/stats").json()  # type: ignore[no-any-return]

    def refunds(self, intent_key: str) -> list[dict[str, Any]]:
        """The refunds whose metadata carries `intent_key`."""
        return self.http.get("/v1/refunds", params={"intent_key": intent_key}).json()["data"]  # type: ignore[no-any-return]

    def stop(self) -> None:
        self.http.close()
        self.process.stop()


class Gateway:
    """`intentgate serve` with a SQLite ledger in `folder`, and the refund tool of `CONFIG`
    (with `api_keys` in place of `auth: none` when given) or the config file `config`."""

    def __init__(
        self,
        folder: pathlib.Path,
        api_keys: list[tuple[str, str, str, str]] | None = None,
        *,
        config: pathlib.Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        if config is None:
            config = folder / "gateway.yaml"
            config.write_text(CONFIG if api_keys is None else with_api_keys(CONFIG, api_keys))
        self.process = Process(
            ["serve", "--listen", "127.0.0.1:0", "--config", str(config), "--ledger", str(folder / "ledger.db"), "--durability", "relaxed"],
            folder / "serve.log",
            env,
        )
        self.url = self.process.url

    def stop(self) -> None:
        self.process.stop()


def run_example(script: str, args: list[str], gateway: Gateway, mock: Mock) -> str:
    """Runs `examples/<script>` with `args` against `gateway` and `mock` as a user would
    (its working directory the repository); answers what it printed, failing on an exit
    status other than 0."""
    # No traces of the OpenAI Agents SDK leave the machine (the example turns them off too).
    env = {**os.environ, "INTENTGATE_URL": gateway.url, "INTENTGATE_MOCK_URL": mock.url, "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    env.pop("INTENTGATE_API_KEY", None)
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=REPOSITORY,
        env=env,
        capture_output=True,
        text=True,
        timeout=PROCESS_WAIT_SECONDS * 4,
    )
    assert run.returncode == 0, f"{script} exited with {run.returncode}:\n{run.stdout}\n{run.stderr}"
    return run.stdout


def with_api_keys(config: str, keys: list[tuple[str, str, str, str]]) -> str:
    """`config` with `auth: none` replaced by API keys, one per `(name, key, tenant, scopes)`
    (scopes as YAML list items, `call, intents:read`)."""
    section = "auth:\n  api_keys:\n"
    for name, key, tenant, scopes in keys:
        digest = hashlib.sha256(key.encode()).hexdigest()
        section += f"    - name: {name}\n      sha256: {digest}\n      tenant: {tenant}\n      scopes: [{scopes}]\n"
    assert "\nauth: none\n" in config
    return config.replace("\nauth: none\n", "\n" + section)


class Declined(Exception):
    """The provider refused the refund (402): nothing happened."""


class RateLimited(Exception):
    """The provider refused before processing anything (429, or 503 with Retry-After)."""


def refund_tool(client: intentgate.Client, mock_url: str, *, http_retries: int = 0) -> Any:
    """The refund tool the tests run: `refund_order(order_id, amount)` through `client`.

    With `http_retries`, the body's HTTP client re-sends a refund whose request failed (a
    transport error, a 409, 429 or 5xx) that many times with the same key before the body
    reports the failure, as provider SDKs do on their own (`stripe.max_network_retries`)."""
    provider = httpx.Client(base_url=mock_url, timeout=PROVIDER_TIMEOUT_SECONDS)

    def send(idempotency_key: str, body: dict[str, Any]) -> httpx.Response:
        """`POST /v1/refunds`, sent again up to `http_retries` times after a failure."""
        for attempt in range(http_retries + 1):
            last = attempt == http_retries
            try:
                response = provider.post("/v1/refunds", json=body, headers={"Idempotency-Key": idempotency_key})
            except httpx.TransportError:
                if last:
                    raise
                continue
            if last or not (response.status_code in HTTP_RETRY_STATUSES or response.status_code >= 500):
                return response
        raise AssertionError("unreachable: the last attempt returns or raises")

    def find_refund(order_id: str, amount: Decimal, idempotency_key: str) -> dict[str, Any] | None:
        """The refund made under this key, or None."""
        found = provider.get("/v1/refunds", params={"intent_key": idempotency_key})
        found.raise_for_status()
        data = found.json()["data"]
        return data[0] if data else None

    @client.side_effect(
        "refund_order",
        rejected=Declined,
        not_processed=RateLimited,
        lookup=find_refund,
        external_id="id",
    )
    def refund_order(order_id: str, amount: Decimal, *, idempotency_key: str) -> dict[str, Any]:
        """Refund part or all of an order. Safe to call once per order."""
        response = send(idempotency_key, {"order_id": order_id, "amount": str(amount), "metadata": {"intent_key": idempotency_key}})
        if response.status_code == 402:
            raise Declined(response.json()["error"]["message"])
        if response.status_code == 429 or (response.status_code == 503 and "retry-after" in response.headers):
            raise RateLimited(f"{response.status_code} before processing")
        # Anything else that is not a success (a 5xx, a 409 while the key is being
        # processed) and every transport error is ambiguous: not listed, so unknown.
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    return refund_order


def run_calls(gateway_url: str, mock_url: str, calls: list[tuple[str, str]], threads: int) -> list[dict[str, Any]]:
    """Runs `refund_order(order_id, amount)` for each of `calls` from `threads` threads of
    this process, sharing one client; answers one record per call: `order_id`,
    `started_ms`, `status`, `result_id` (or `error`)."""
    with intentgate.Client(gateway_url, timeout=30) as client:
        refund_order = refund_tool(client, mock_url)

        def one(call: tuple[str, str]) -> dict[str, Any]:
            order_id, amount = call
            started_ms = int(time.time() * 1000)
            try:
                outcome = refund_order(order_id, Decimal(amount))
            except Exception as error:  # counted and shown by the test
                return {"order_id": order_id, "started_ms": started_ms, "status": "error", "error": repr(error)}
            result = outcome.get("result")
            result_id = result.get("id") if isinstance(result, dict) else None
            return {"order_id": order_id, "started_ms": started_ms, "status": outcome["status"], "result_id": result_id}

        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            return list(pool.map(one, calls))


def kill_worker(gateway_url: str, mock_url: str, order_id: str, amount: str) -> None:
    """Calls the refund tool with a body that sends the refund, prints `sent` and hangs
    (the test SIGKILLs this process there)."""
    with intentgate.Client(gateway_url, timeout=30) as client:
        provider = httpx.Client(base_url=mock_url, timeout=PROCESS_WAIT_SECONDS)

        @client.side_effect("refund_order")
        def refund_order(order_id: str, amount: Decimal, *, idempotency_key: str) -> None:
            response = provider.post(
                "/v1/refunds",
                json={"order_id": order_id, "amount": str(amount), "metadata": {"intent_key": idempotency_key}},
                headers={"Idempotency-Key": idempotency_key},
            )
            print(json.dumps({"sent": response.status_code, "key": idempotency_key}), flush=True)
            time.sleep(3600)

        refund_order(order_id, Decimal(amount))


if __name__ == "__main__":
    assert sys.argv[1] == "kill-worker", sys.argv
    kill_worker(*sys.argv[2:6])
