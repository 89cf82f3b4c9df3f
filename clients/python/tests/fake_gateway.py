"""A scripted stand-in for the gateway's intent API, behind `httpx.MockTransport`, for the
unit tests of the client and its decorator. Each test queues the answers of grants and
settles; renewals answer the same lease again (or 409 when told). Every request is kept,
parsed, so a test can check what the client sent."""

from __future__ import annotations

import json
import threading
from collections import deque
from decimal import Decimal
from typing import Any

import httpx

LEASE_TOKEN = "igl_test_token"
KEY = "refund_order:refund:o-1:5.00"


def lease(duration_ms: int = 30_000, token: str = LEASE_TOKEN) -> dict[str, Any]:
    return {"token": token, "expires_at_ms": 1_764_550_000_000, "duration_ms": duration_ms}


def grant(action: str, intent_id: int = 42, *, resend: bool = False, attempt: int = 1, duration_ms: int = 30_000) -> dict[str, Any]:
    return {
        "action": action,
        "intent_id": intent_id,
        "tool": "refund_order",
        "intent_key": "refund:o-1:5.00",
        "idempotency_key": KEY,
        "attempt": attempt,
        "resend": resend,
        "lease": lease(duration_ms),
    }


def execute(**fields: Any) -> dict[str, Any]:
    return grant("execute", **fields)


def look_up(**fields: Any) -> dict[str, Any]:
    return grant("look_up", **fields)


def answer(status: str, **fields: Any) -> dict[str, Any]:
    return {"action": "answer", "outcome": {"status": status, "tool": "refund_order", "message": f"{status}.", **fields}}


def problem(status: int, kind: str, detail: str = "") -> httpx.Response:
    body = {"type": f"urn:intentgate:problem:{kind}", "title": kind.replace("-", " "), "status": status, "detail": detail}
    return httpx.Response(status, json=body, headers={"content-type": "application/problem+json"})


def lease_lost() -> httpx.Response:
    return problem(409, "lease-lost", "the lease is no longer held; ask for a grant again")


Scripted = dict[str, Any] | httpx.Response | Exception


class FakeGateway:
    """Answers grants and settles from queues, renewals from `renew_answer`."""

    def __init__(self) -> None:
        self.grants: deque[Scripted] = deque()
        self.settles: deque[Scripted] = deque()
        self.renew_answer: Scripted | None = None
        # Renewals answer the duration of the last lease granted.
        self.duration_ms = 30_000
        self.requests: list[tuple[str, str, Any, httpx.Headers]] = []
        self._lock = threading.Lock()

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def sent(self, kind: str) -> list[Any]:
        """The bodies of the requests of one kind (`grant`, `renew`, `settle`, ...)."""
        with self._lock:
            return [body for k, _, body, _ in self.requests if k == kind]

    def kinds(self) -> list[str]:
        with self._lock:
            return [k for k, _, _, _ in self.requests if k != "renew"]

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content, parse_float=Decimal) if request.content else None
        if request.method == "POST" and path.endswith("/intents"):
            kind, queue = "grant", self.grants
        elif path.endswith("/settle"):
            kind, queue = "settle", self.settles
        elif path.endswith("/renew"):
            kind, queue = "renew", None
        else:
            kind, queue = f"{request.method} {path}", None
        with self._lock:
            self.requests.append((kind, path, body, request.headers))
        if kind == "renew":
            scripted: Scripted = self.renew_answer or {"lease": lease(self.duration_ms)}
        elif queue is not None:
            assert queue, f"unscripted {kind}: {body}"
            scripted = queue.popleft()
        else:
            raise AssertionError(f"unexpected request {request.method} {path}")
        if isinstance(scripted, Exception):
            raise scripted
        if isinstance(scripted, httpx.Response):
            return scripted
        if "lease" in scripted and kind != "renew":
            self.duration_ms = scripted["lease"]["duration_ms"]
        return httpx.Response(200, json=scripted)
