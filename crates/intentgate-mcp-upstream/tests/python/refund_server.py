"""A refund provider as an MCP server (stdio), for the tests of intentgate-mcp-upstream.

Its effects live in the JSON file that REFUND_STATE names, so they outlive a restart: one
record per idempotency key, with `effects`, the number of times that refund was performed
(a repeat of a key replays its record). The order id says how a call behaves:

- `refuse-...`: an `isError` result, "card declined"; nothing is recorded.
- `ratelimit-...`: an `isError` result, "Rate limit exceeded, retry later"; nothing recorded.
- `die-...`: the refund is recorded, then the process exits before it answers (once per key).
- `slow-...`: the answer comes after 3 s (the refund is recorded first).
- `invalid-...`: a JSON-RPC error -32602 (invalid params); nothing recorded.

Each start writes its process id to a file `pid` beside the state. With REFUND_HTTP_PORT set, the server speaks Streamable HTTP at http://127.0.0.1:PORT/mcp
instead of stdio. With REFUND_STARTS_MAX set, starts past that many (counted in a file beside the state) print
a line with a control character to stderr and exit at once: a server that can't come back.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

STATE = pathlib.Path(os.environ["REFUND_STATE"])

server = MCPServer("refunds")


def load() -> dict[str, Any]:
    if STATE.exists():
        return json.loads(STATE.read_text())
    return {}


def save(effects: dict[str, Any]) -> None:
    partial = STATE.with_suffix(".partial")
    partial.write_text(json.dumps(effects))
    os.replace(partial, STATE)


def meta_key(ctx: Context) -> str | None:
    meta = ctx.request_context.meta
    if meta is None:
        return None
    fields = meta.model_dump() if hasattr(meta, "model_dump") else dict(meta)
    extra = getattr(meta, "model_extra", None) or {}
    return fields.get("idempotency_key") or extra.get("idempotency_key")


async def perform(order_id: str, amount: Any, key: str | None) -> dict[str, Any]:
    if order_id.startswith("invalid-"):
        raise MCPError(-32602, "amount: must be positive")
    if order_id.startswith("refuse-"):
        raise ToolError("card declined")
    if order_id.startswith("ratelimit-"):
        raise ToolError("Rate limit exceeded, retry later")
    if not key:
        raise ToolError("no idempotency key")
    effects = load()
    record = effects.get(key)
    if record is None:
        record = {
            "id": f"re_{len(effects) + 1}",
            "order_id": order_id,
            "amount": str(amount),
            "idempotency_key": key,
            "effects": 1,
        }
        effects[key] = record
        save(effects)
        if order_id.startswith("die-"):
            print(f"dying after refund {record['id']}", file=sys.stderr, flush=True)
            os._exit(1)
    if order_id.startswith("slow-"):
        await asyncio.sleep(3)
    return record


@server.tool()
async def refund(order_id: str, amount: float | str, idempotency_key: str | None = None) -> dict[str, Any]:
    """Refund an order, once per idempotency key."""
    return await perform(order_id, amount, idempotency_key)


@server.tool()
async def refund_meta(order_id: str, amount: float | str, ctx: Context) -> dict[str, Any]:
    """Refund an order, once per idempotency key given in the request's _meta."""
    return await perform(order_id, amount, meta_key(ctx))


@server.tool()
async def find_refund(order_id: str) -> dict[str, Any]:
    """The refund of an order, or null."""
    for record in load().values():
        if record["order_id"] == order_id:
            return {"refund": record}
    return {"refund": None}


@server.tool()
async def request_header(name: str, ctx: Context) -> dict[str, Any]:
    """The value of the HTTP request header `name` (Streamable HTTP only), or null."""
    request = getattr(ctx.request_context, "request", None)
    headers = getattr(request, "headers", None)
    return {"value": headers.get(name) if headers is not None else None}


if __name__ == "__main__":
    STATE.with_name("pid").write_text(str(os.getpid()))
    starts_max = os.environ.get("REFUND_STARTS_MAX")
    if starts_max is not None:
        starts = STATE.with_name("starts")
        count = int(starts.read_text()) + 1 if starts.exists() else 1
        starts.write_text(str(count))
        if count > int(starts_max):
            print(f"start {count} refused \x07", file=sys.stderr, flush=True)
            sys.exit(1)
    port = os.environ.get("REFUND_HTTP_PORT")
    if port is not None:
        server.run("streamable-http", host="127.0.0.1", port=int(port))
    else:
        server.run("stdio")
