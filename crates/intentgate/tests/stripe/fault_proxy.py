"""A fault-injecting proxy in front of localstripe, playing Stripe's idempotency-key layer.

    python fault_proxy.py --upstream http://127.0.0.1:<localstripe port> --port-file F

listens on 127.0.0.1 on a free port and writes that port to F (atomically) once it accepts
connections. Everything not under /__ is forwarded to the upstream.

localstripe keeps refunds and payment intents as Stripe does, but has no idempotency keys
and no `created[...]` list filters. This proxy adds both, as Stripe behaves:

- A POST with an `Idempotency-Key` header: the first answer for a key is stored for 24 h and
  every later request with that key gets it again with `Idempotent-Replayed: true`. As at
  Stripe, only answers of a request that started executing are stored (2xx, 402, 5xx), not
  refusals of its parameters (other 4xx). The same
  key with other parameters (method, path or form body) is a 400 `idempotency_error`; the
  same key while its first request is still being answered is a 409
  `idempotency_key_in_use`. Neither of those is stored, nor forwarded.
- `GET /v1/refunds` (and `GET /v1/payment_intents`) with `created[gte|gt|lt|lte]`: those
  are removed from the forwarded query, every page is read from the upstream, and `data`,
  `has_more`, `limit` and `starting_after` are applied here to the records within the
  window.

Faults, each applied once to the next request that matches its method and path, in the
order they were queued (POST /__faults):

- lose_answer: forwarded, the answer stored under the key, the connection closed unanswered.
- timeout_before: held for 30 s without being forwarded, then closed; nothing stored.
- store_500: forwarded, then a 500 `api_error` answered and stored under the key in place of
  the upstream's answer, so every later request with the key gets that 500 replayed.
- store_500_before: not forwarded (nothing happens upstream: the refund never commits); a
  500 `api_error` answered and stored under the key, so every later request with the key
  gets that 500 replayed, as Stripe does for a request that failed before it committed.
- rate_limit: a 429 with `Retry-After: 1`; not forwarded, not stored.
- drop: the connection closed before anything is forwarded; nothing stored.

A request the key layer answers (a replay, a 400 idempotency_error, a 409) takes no fault.

Control:
- POST /__faults  {"faults": [{"method": "POST", "path": "/v1/refunds", "kind": "..."}]}
- GET  /__stats   {"requests": [{"method", "path", "query", "idempotency_key", "status",
                   "replayed", "forwarded", "fault"}]}: every request seen, in arrival
                   order (query as sent; fault: the kind applied, or null); status is
                   null for a connection closed unanswered.
- POST /__reset   clears the queued faults and the stats (not the key store).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import urllib.parse

import aiohttp
import yarl
from aiohttp import web

KINDS = {"lose_answer", "timeout_before", "store_500", "store_500_before", "rate_limit", "drop"}
KEY_WINDOW_S = 24 * 3600
HOLD_S = 30
# Headers not passed on either way.
HOP = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "accept-encoding",
    "content-encoding",
}
WINDOWED = {"/v1/refunds", "/v1/payment_intents"}
CREATED = {"created[gte]", "created[gt]", "created[lt]", "created[lte]", "created"}


class Stored:
    """The answer a key was given, with what it was asked for."""

    def __init__(self, fingerprint, status, body, content_type):
        self.fingerprint = fingerprint
        self.status = status
        self.body = body
        self.content_type = content_type
        self.at = time.monotonic()


class Proxy:
    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.faults: list[dict] = []
        self.requests: list[dict] = []
        self.keys: dict[str, Stored] = {}
        # Keys whose first request is being answered, with what it asked for.
        self.running: dict[str, tuple] = {}
        self.session: aiohttp.ClientSession | None = None

    async def start(self, app):
        self.session = aiohttp.ClientSession(auto_decompress=True)

    async def stop(self, app):
        await self.session.close()

    # -- control -----------------------------------------------------------------------

    async def set_faults(self, request):
        body = await request.json()
        faults = body.get("faults")
        if not isinstance(faults, list):
            return web.json_response({"error": "expected {\"faults\": [...]}"}, status=400)
        for fault in faults:
            if (
                not isinstance(fault, dict)
                or fault.get("kind") not in KINDS
                or not isinstance(fault.get("method"), str)
                or not isinstance(fault.get("path"), str)
            ):
                return web.json_response(
                    {"error": f"a fault is {{method, path, kind}} with kind one of "
                              f"{sorted(KINDS)}: {fault!r}"},
                    status=400,
                )
        self.faults.extend(
            {"method": f["method"].upper(), "path": f["path"], "kind": f["kind"]}
            for f in faults
        )
        return web.json_response({"queued": len(self.faults)})

    async def stats(self, request):
        return web.json_response({"requests": self.requests})

    async def reset(self, request):
        self.faults.clear()
        self.requests.clear()
        return web.json_response({"reset": True})

    # -- proxying ----------------------------------------------------------------------

    def take_fault(self, method: str, path: str):
        for index, fault in enumerate(self.faults):
            if fault["method"] == method and fault["path"] == path:
                return self.faults.pop(index)["kind"]
        return None

    async def forward(self, request, body: bytes, query=None):
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        if query is None:
            # The query exactly as it came (bracketed names and all).
            url = yarl.URL(self.upstream + request.raw_path, encoded=True)
        else:
            url = yarl.URL(self.upstream + request.path).with_query(query)
        async with self.session.request(
            request.method, url, data=body or None, headers=headers
        ) as answer:
            return answer.status, await answer.read(), answer.headers.get(
                "Content-Type", "application/json"
            )

    async def handle(self, request):
        method, path = request.method, request.path
        key = request.headers.get("Idempotency-Key") if method == "POST" else None
        body = await request.read()
        seen = {
            "method": method,
            "path": path,
            "query": request.query_string,
            "idempotency_key": key,
            "status": None,
            "replayed": False,
            "forwarded": False,
            "fault": None,
        }
        self.requests.append(seen)

        if key is not None:
            self.expire_keys()
            fingerprint = (method, path, canonical_form(body))
            stored = self.keys.get(key)
            if stored is not None:
                if stored.fingerprint != fingerprint:
                    return answer(seen, idempotency_error(key))
                seen["replayed"] = True
                return answer(
                    seen,
                    web.Response(
                        status=stored.status,
                        body=stored.body,
                        content_type=stored.content_type.split(";")[0],
                        headers={"Idempotent-Replayed": "true", "Idempotency-Key": key},
                    ),
                )
            if key in self.running:
                if self.running[key] != fingerprint:
                    return answer(seen, idempotency_error(key))
                return answer(seen, key_in_use(key))

        kind = self.take_fault(method, path)
        seen["fault"] = kind
        if kind == "rate_limit":
            return answer(
                seen,
                stripe_error(
                    429,
                    "rate_limit_error",
                    "Too many requests hit the API too quickly.",
                    headers={"Retry-After": "1"},
                ),
            )
        if kind == "drop":
            return await close_unanswered(request)
        if kind == "timeout_before":
            await asyncio.sleep(HOLD_S)
            return await close_unanswered(request)
        if kind == "store_500_before":
            data = server_error("An unknown error occurred (injected before commit).")
            if key is not None:
                self.keys[key] = Stored(fingerprint, 500, data, "application/json")
            headers = {"Idempotency-Key": key} if key is not None else {}
            return answer(
                seen,
                web.Response(status=500, body=data, content_type="application/json", headers=headers),
            )

        if key is not None:
            self.running[key] = fingerprint
        try:
            if method == "GET" and path in WINDOWED and any(
                name in CREATED for name in request.query.keys()
            ):
                status, data, content_type = await self.windowed_refunds(request)
            else:
                status, data, content_type = await self.forward(request, body)
            seen["forwarded"] = True
            if kind == "store_500":
                status, data, content_type = (
                    500,
                    server_error("An unknown error occurred (injected after commit)."),
                    "application/json",
                )
            if key is not None and stored_by_stripe(status):
                self.keys[key] = Stored(fingerprint, status, data, content_type)
        finally:
            if key is not None:
                self.running.pop(key, None)

        if kind == "lose_answer":
            return await close_unanswered(request)
        headers = {"Idempotency-Key": key} if key is not None else {}
        return answer(
            seen,
            web.Response(
                status=status,
                body=data,
                content_type=content_type.split(";")[0],
                headers=headers,
            ),
        )

    def expire_keys(self):
        now = time.monotonic()
        for key in [k for k, s in self.keys.items() if now - s.at > KEY_WINDOW_S]:
            del self.keys[key]

    async def windowed_refunds(self, request):
        """A list with a `created` window: every page of the upstream's list, filtered here,
        then paged here."""
        window = []
        passed = []
        for name, value in request.query.items():
            if name in CREATED:
                window.append((name, int(value)))
            elif name not in ("limit", "starting_after"):
                passed.append((name, value))
        limit = int(request.query.get("limit", "10"))
        starting_after = request.query.get("starting_after")
        records = []
        cursor = None
        while True:
            query = passed + [("limit", "100")]
            if cursor is not None:
                query.append(("starting_after", cursor))
            status, data, content_type = await self.forward(request, b"", query)
            if status != 200:
                return status, data, content_type
            page = json.loads(data)
            records.extend(page["data"])
            if not page.get("has_more") or not page["data"]:
                break
            cursor = page["data"][-1]["id"]
        records = [r for r in records if all(within(r["created"], n, v) for n, v in window)]
        start = 0
        if starting_after is not None:
            for index, record in enumerate(records):
                if record["id"] == starting_after:
                    start = index + 1
                    break
        chosen = records[start:start + limit]
        listing = {
            "object": "list",
            "url": request.path,
            "data": chosen,
            "has_more": len(records) > start + limit,
        }
        return 200, json.dumps(listing).encode(), "application/json"


def stored_by_stripe(status: int) -> bool:
    """Whether Stripe keeps this answer for the key: it does once the request started
    executing (a success, a declined card, a 500), not for a request refused before
    (parameters that failed validation, a missing object, a conflict, a rate limit)."""
    return status < 400 or status == 402 or status >= 500


def server_error(message: str) -> bytes:
    """The body of Stripe's 500 `api_error`."""
    return json.dumps({"error": {"type": "api_error", "message": message}}).encode()


def within(created: int, name: str, value: int) -> bool:
    return {
        "created": created == value,
        "created[gte]": created >= value,
        "created[gt]": created > value,
        "created[lt]": created < value,
        "created[lte]": created <= value,
    }[name]


def canonical_form(body: bytes):
    """The parameters of a form body, order aside (what Stripe compares a key's requests
    by); other bodies as their bytes."""
    try:
        text = body.decode()
        return tuple(sorted(urllib.parse.parse_qsl(text, keep_blank_values=True)))
    except (UnicodeDecodeError, ValueError):
        return body


def stripe_error(status, kind, message, code=None, headers=None):
    error = {"type": kind, "message": message}
    if code is not None:
        error["code"] = code
    return web.json_response({"error": error}, status=status, headers=headers)


def idempotency_error(key):
    return stripe_error(
        400,
        "idempotency_error",
        f"Keys for idempotent requests can only be used with the same parameters they "
        f"were first used with. Try using a key other than '{key}' if you meant to execute "
        f"a different request.",
    )


def key_in_use(key):
    return stripe_error(
        409,
        "invalid_request_error",
        f"There is currently another in-progress request using this Idempotent Key "
        f"('{key}'), probably because you issued a request while a previous one was "
        f"in progress. Please try again later.",
        code="idempotency_key_in_use",
    )


def answer(seen, response):
    seen["status"] = response.status
    return response


async def close_unanswered(request):
    """Closes the client's connection without a response."""
    request.transport.close()
    # The handler must end; what it returns can't be written to a closed transport.
    raise asyncio.CancelledError()


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port-file", required=True)
    args = parser.parse_args()

    proxy = Proxy(args.upstream)
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.on_startup.append(proxy.start)
    app.on_cleanup.append(proxy.stop)
    app.router.add_post("/__faults", proxy.set_faults)
    app.router.add_get("/__stats", proxy.stats)
    app.router.add_post("/__reset", proxy.reset)
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    await serve_on_a_free_port(app, args.port_file)


async def serve_on_a_free_port(app: web.Application, port_file: str) -> None:
    """Serves `app` on 127.0.0.1 on a free port until cancelled, writing the port to
    `port_file` (atomically) once it accepts connections. localstripe_server.py uses it too."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    partial = port_file + ".partial"
    with open(partial, "w") as f:
        f.write(f"{port}\n")
    os.replace(partial, port_file)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
