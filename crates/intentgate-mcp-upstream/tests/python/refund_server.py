"""A refund provider as an MCP server (stdio), for the tests of intentgate-mcp-upstream and
the MCP upstream retry storm of crates/intentgate-mcp/tests/python.

Its effects live in the JSON file that REFUND_STATE names, so they outlive a restart: one
record per idempotency key, with `effects`, the number of times that refund was performed
(a repeat of a key replays its record without performing it again). The order id says how a
call behaves:

- `refuse-...`: an `isError` result, "card declined"; nothing is recorded.
- `invalid-...`: a JSON-RPC error -32602 (invalid params); nothing recorded.
- `ratelimit-...`: an `isError` result, "Rate limit exceeded, retry later"; nothing recorded.
- `die-...`: the refund is recorded, then the process exits before it answers (once per key).
- `crash-...`: the process exits before it records anything (killed mid-call, nothing done).
- `slow-...`: the answer comes after 3 s (the refund is recorded first).
- `lost-...`: the refund is recorded and the answer never comes (the handler waits until it is
  cancelled or the process ends).

The first two are answers, given every time. The others are faults: with REFUND_FAULTS_PER_ORDER
set, each fires at most that many times per order id and the call then behaves as a plain one
(the counts, by fault and order, are kept in `faults.json` beside the state, so they outlive a
restart too). Without REFUND_FAULTS_PER_ORDER they fire every time (`die-` once per key, as it
only dies on a new record).

Each record has `created_ms`, when it was made, and the `intent_key` the caller passed (or
null). `list_refunds` pages through the records made in a window, oldest first, for
reconciliation, at most REFUND_PAGE_MAX (default 100) a page, as providers cap their pages; a
record added to the state file by hand is a refund made around the gateway.

Each start writes its process id to a file `pid` beside the state and counts itself in a file
`starts`. With REFUND_HTTP_PORT set, the server speaks Streamable HTTP at
http://127.0.0.1:PORT/mcp instead of stdio. With REFUND_STARTS_MAX set, starts past that many
print a line with a control character to stderr and exit at once: a server that can't come back.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import ToolAnnotations

STATE = pathlib.Path(os.environ["REFUND_STATE"])
FAULTS = STATE.with_name("faults.json")
# How long a `slow-` answer takes: past the timeouts the tests configure.
SLOW_SECONDS = 3

server = MCPServer("refunds")


def read_json(path: pathlib.Path) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())
    return {}


def write_text(path: pathlib.Path, text: str) -> None:
    # Written aside and renamed, so a process killed mid-write leaves the old file whole and
    # a reader never sees half of it.
    partial = path.with_name(f"{path.name}.partial")
    partial.write_text(text)
    os.replace(partial, path)


def write_json(path: pathlib.Path, value: dict[str, Any]) -> None:
    write_text(path, json.dumps(value))


def load() -> dict[str, Any]:
    return read_json(STATE)


def save(effects: dict[str, Any]) -> None:
    write_json(STATE, effects)


def fault(kind: str, order_id: str) -> bool:
    """Whether the fault `kind` fires for `order_id` now; if so, it is counted."""
    if not order_id.startswith(f"{kind}-"):
        return False
    limit = os.environ.get("REFUND_FAULTS_PER_ORDER")
    if limit is None:
        return True
    counts = read_json(FAULTS)
    name = f"{kind}:{order_id}"
    if counts.get(name, 0) >= int(limit):
        return False
    counts[name] = counts.get(name, 0) + 1
    write_json(FAULTS, counts)
    return True


def meta_key(ctx: Context) -> str | None:
    meta = ctx.request_context.meta
    if meta is None:
        return None
    fields = meta.model_dump() if hasattr(meta, "model_dump") else dict(meta)
    extra = getattr(meta, "model_extra", None) or {}
    return fields.get("idempotency_key") or extra.get("idempotency_key")


def exit_now(why: str) -> None:
    print(why, file=sys.stderr, flush=True)
    os._exit(1)


async def perform(
    order_id: str, amount: Any, key: str | None, intent_key: str | None = None
) -> dict[str, Any]:
    if order_id.startswith("invalid-"):
        raise MCPError(-32602, "amount: must be positive")
    if order_id.startswith("refuse-"):
        raise ToolError("card declined")
    if fault("ratelimit", order_id):
        raise ToolError("Rate limit exceeded, retry later")
    if not key:
        raise ToolError("no idempotency key")
    if fault("crash", order_id):
        exit_now(f"crashing before the refund of {order_id}")
    effects = load()
    record = effects.get(key)
    if record is None:
        record = {
            "id": f"re_{len(effects) + 1}",
            "order_id": order_id,
            "amount": str(amount),
            "idempotency_key": key,
            "intent_key": intent_key,
            "created_ms": int(time.time() * 1000),
            "effects": 1,
        }
        effects[key] = record
        save(effects)
        if fault("die", order_id):
            exit_now(f"dying after refund {record['id']}")
    if fault("lost", order_id):
        # The effect is recorded; its answer never leaves.
        await asyncio.Event().wait()
    if fault("slow", order_id):
        await asyncio.sleep(SLOW_SECONDS)
    return record


@server.tool()
async def refund(
    order_id: str,
    amount: float | str,
    idempotency_key: str | None = None,
    intent_key: str | None = None,
) -> dict[str, Any]:
    """Refund an order, once per idempotency key; `intent_key` is kept with the refund."""
    return await perform(order_id, amount, idempotency_key, intent_key)


@server.tool()
async def refund_meta(order_id: str, amount: float | str, ctx: Context) -> dict[str, Any]:
    """Refund an order, once per idempotency key given in the request's _meta."""
    return await perform(order_id, amount, meta_key(ctx))


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def find_refund(order_id: str) -> dict[str, Any]:
    """The refund of an order, or null."""
    for record in load().values():
        if record["order_id"] == order_id:
            return {"refund": record}
    return {"refund": None}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def list_refunds(
    since_ms: int, until_ms: int, limit: int = 100, cursor: str | None = None
) -> dict[str, Any]:
    """The refunds made in [since_ms, until_ms), oldest first, `limit` a page; pass the
    answer's `next_cursor` back for the next page (null after the last)."""
    made = sorted(
        (record for record in load().values() if since_ms <= record.get("created_ms", 0) < until_ms),
        key=lambda record: (record.get("created_ms", 0), record["id"]),
    )
    start = int(cursor) if cursor else 0
    page = made[start : start + min(limit, int(os.environ.get("REFUND_PAGE_MAX", "100")))]
    end = start + len(page)
    return {"refunds": page, "next_cursor": str(end) if end < len(made) else None}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def request_header(name: str, ctx: Context) -> dict[str, Any]:
    """The value of the HTTP request header `name` (Streamable HTTP only), or null."""
    request = getattr(ctx.request_context, "request", None)
    headers = getattr(request, "headers", None)
    return {"value": headers.get(name) if headers is not None else None}


if __name__ == "__main__":
    write_text(STATE.with_name("pid"), str(os.getpid()))
    starts = STATE.with_name("starts")
    count = int(starts.read_text()) + 1 if starts.exists() else 1
    write_text(starts, str(count))
    starts_max = os.environ.get("REFUND_STARTS_MAX")
    if starts_max is not None and count > int(starts_max):
        print(f"start {count} refused \x07", file=sys.stderr, flush=True)
        sys.exit(1)
    port = os.environ.get("REFUND_HTTP_PORT")
    if port is not None:
        server.run("streamable-http", host="127.0.0.1", port=int(port))
    else:
        server.run("stdio")
