"""With `opentelemetry` installed, every request carries the current span's W3C context
(`traceparent`, `tracestate`), so the gateway's trace of a call continues the agent's; outside
a span nothing is added."""

from __future__ import annotations

import asyncio

import httpx
from opentelemetry import context, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

import intentgate

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Recorder:
    """A transport that answers `GET /v1/tools` and keeps every request's headers."""

    def __init__(self) -> None:
        self.headers: list[httpx.Headers] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.headers.append(request.headers)
        return httpx.Response(200, json={"tools": []})


def in_span() -> object:
    """Makes a sampled span with the test's ids current; returns the token to detach."""
    span = NonRecordingSpan(
        SpanContext(
            TRACE_ID,
            SPAN_ID,
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
            trace_state=TraceState([("vendor", "value")]),
        )
    )
    return context.attach(trace.set_span_in_context(span))


def test_a_request_inside_a_span_carries_its_traceparent() -> None:
    recorder = Recorder()
    client = intentgate.Client("http://gateway.test", "key-1", transport=httpx.MockTransport(recorder))
    token = in_span()
    try:
        client.tools()
    finally:
        context.detach(token)  # type: ignore[arg-type]
    client.tools()
    inside, outside = recorder.headers
    assert inside["traceparent"] == TRACEPARENT
    assert inside["tracestate"] == "vendor=value"
    assert inside["authorization"] == "Bearer key-1"
    assert "traceparent" not in outside


def test_the_async_client_carries_it_too() -> None:
    recorder = Recorder()

    async def run() -> None:
        client = intentgate.AsyncClient("http://gateway.test", "key-1", transport=httpx.MockTransport(recorder))
        token = in_span()
        try:
            await client.tools()
        finally:
            context.detach(token)  # type: ignore[arg-type]
        await client.aclose()

    asyncio.run(run())
    assert recorder.headers[0]["traceparent"] == TRACEPARENT
