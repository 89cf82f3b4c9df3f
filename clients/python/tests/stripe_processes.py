"""The Stripe side of test_stripe_sdk.py: localstripe (a stateful Stripe emulator from PyPI)
and the tests' fault proxy in front of it, both run from the venv `.ci/run` makes under
target/stripe-venv (from crates/intentgate/tests/stripe/requirements.txt), as child
processes on loopback ports.

The proxy (crates/intentgate/tests/stripe/fault_proxy.py) plays Stripe's idempotency-key
layer, which localstripe lacks, and injects the faults the tests queue. What the tests
assert is read from localstripe itself, not through the proxy.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import time
from typing import Any

import httpx

from processes import PROCESS_WAIT_SECONDS, REPOSITORY

STRIPE_TESTS = REPOSITORY / "crates" / "intentgate" / "tests" / "stripe"
STRIPE_VENV = REPOSITORY / "target" / "stripe-venv"
STRIPE_PYTHON = STRIPE_VENV / "bin" / "python"
#: A test-mode secret key: localstripe takes any `sk_...`.
SECRET_KEY = "sk_test_intentgate_python_client"
#: How often a child's port file is looked for while it starts.
POLL_SECONDS = 0.02


def missing() -> str | None:
    """Why the Stripe tests can't run here, or None."""
    for path in (STRIPE_PYTHON, STRIPE_TESTS / "localstripe_server.py", STRIPE_TESTS / "fault_proxy.py"):
        if not path.exists():
            return (
                f"{path.relative_to(REPOSITORY)} is missing: run .ci/run, or make the venv with "
                f"`python3 -m venv target/stripe-venv && target/stripe-venv/bin/pip install -r "
                f"crates/intentgate/tests/stripe/requirements.txt`"
            )
    try:
        import stripe  # noqa: F401
    except ImportError:
        return "the stripe SDK is not installed here: `pip install -r clients/python/tests/requirements.txt`"
    return None


class PortFileProcess:
    """`python SCRIPT ARGS --port-file F` from the Stripe venv, which writes its port to F
    once it accepts connections."""

    def __init__(self, script: str, args: list[str], folder: pathlib.Path, name: str) -> None:
        port_file = folder / f"{name}.port"
        log = folder / f"{name}.log"
        self.process = subprocess.Popen(
            [str(STRIPE_PYTHON), str(STRIPE_TESTS / script), *args, "--port-file", str(port_file)],
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        deadline = time.monotonic() + PROCESS_WAIT_SECONDS
        while not port_file.exists():
            assert self.process.poll() is None, f"{script} exited with {self.process.returncode}; see {log}"
            assert time.monotonic() < deadline, f"{script} wrote no port in {PROCESS_WAIT_SECONDS} s; see {log}"
            time.sleep(POLL_SECONDS)
        self.url = f"http://127.0.0.1:{int(port_file.read_text())}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(PROCESS_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class LocalStripe:
    """localstripe, asked directly (never through the proxy)."""

    def __init__(self, folder: pathlib.Path) -> None:
        self.process = PortFileProcess("localstripe_server.py", [], folder, "localstripe")
        self.url = self.process.url
        self.http = httpx.Client(base_url=self.url, auth=(SECRET_KEY, ""), timeout=PROCESS_WAIT_SECONDS)

    def payment_intent(self, cents: int) -> str:
        """A succeeded payment of `cents` US cents (test card 4242...), ready to refund."""
        made = self.http.post(
            "/v1/payment_intents",
            data={"amount": str(cents), "currency": "usd", "payment_method": "pm_card_visa", "confirm": "true"},
        )
        made.raise_for_status()
        assert made.json()["status"] == "succeeded", made.json()
        return made.json()["id"]  # type: ignore[no-any-return]

    def refund(self, payment_intent: str, cents: int, metadata: dict[str, str]) -> dict[str, Any]:
        """A refund made by hand, around the gateway."""
        form = {"payment_intent": payment_intent, "amount": str(cents)}
        form.update({f"metadata[{name}]": value for name, value in metadata.items()})
        made = self.http.post("/v1/refunds", data=form)
        made.raise_for_status()
        return made.json()  # type: ignore[no-any-return]

    def refunds(self, payment_intent: str) -> list[dict[str, Any]]:
        """Every refund of `payment_intent`, as localstripe keeps them."""
        found = self.http.get("/v1/refunds", params={"payment_intent": payment_intent, "limit": "100"})
        found.raise_for_status()
        listing = found.json()
        assert not listing["has_more"], "more than 100 refunds of one payment intent"
        return listing["data"]  # type: ignore[no-any-return]

    def stop(self) -> None:
        self.http.close()
        self.process.stop()


class FaultProxy:
    """fault_proxy.py in front of `upstream`, with its control API."""

    def __init__(self, folder: pathlib.Path, upstream: str) -> None:
        self.process = PortFileProcess("fault_proxy.py", ["--upstream", upstream], folder, "fault-proxy")
        self.url = self.process.url
        self.http = httpx.Client(base_url=self.url, timeout=PROCESS_WAIT_SECONDS)

    def faults(self, *kinds: str, method: str = "POST", path: str = "/v1/refunds") -> None:
        """Queues one fault of each of `kinds`, in order, for the next matching requests."""
        faults = [{"method": method, "path": path, "kind": kind} for kind in kinds]
        self.http.post("/__faults", json={"faults": faults}).raise_for_status()

    def requests(self, idempotency_key: str | None = None) -> list[dict[str, Any]]:
        """The requests seen since the last reset (those under `idempotency_key` only, when
        given): `method`, `path`, `idempotency_key`, `status` (None when closed unanswered),
        `replayed`, `forwarded`, `fault`."""
        seen: list[dict[str, Any]] = self.http.get("/__stats").json()["requests"]
        if idempotency_key is None:
            return seen
        return [request for request in seen if request["idempotency_key"] == idempotency_key]

    def reset(self) -> None:
        """Clears the queued faults and the requests seen (not the keys stored)."""
        self.http.post("/__reset").raise_for_status()

    def stop(self) -> None:
        self.http.close()
        self.process.stop()
