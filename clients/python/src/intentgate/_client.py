"""`Client` and `AsyncClient`: one method per route of the gateway's HTTP API, and the
`side_effect` decorator that runs a function of yours under the intent API.

The two classes have the same methods; `AsyncClient`'s are coroutines. Every answer is
parsed with `Decimal` for numbers with a fraction, and every 4xx or 5xx raises
`IntentGateError` (`LeaseLost` for 409 `lease-lost`).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, cast

import httpx

try:
    # Optional: when the application traces with OpenTelemetry, every request carries the
    # current span's context (`traceparent`, `tracestate`), so the gateway's trace of the call
    # continues the agent's.
    from opentelemetry import propagate as _propagate
except ImportError:  # pragma: no cover - exercised where opentelemetry is not installed
    _propagate = None  # type: ignore[assignment]

from intentgate import _json
from intentgate._connections import Connections, stdlib_usable
from intentgate._errors import IntentGateError, LeaseLost, TooManyRounds, error_from_response
from intentgate._intent_id import current_intent_id
from intentgate._side_effect import (
    KEY_PARAMETER,
    MAX_ROUNDS,
    SETTLE_ATTEMPTS,
    Call,
    ExceptionTypes,
    ExternalId,
    ResendStop,
    ResendStopOf,
    SideEffect,
    done_fields,
    is_pending_unknown,
    reason_of,
    renew_interval_seconds,
    result_too_large,
)

__all__ = ["AsyncClient", "Client", "DEFAULT_TIMEOUT_SECONDS"]

#: The default HTTP timeout, in seconds. A grant waits while another caller holds the
#: intent's lease, up to the tool's `timeout_ms` plus a second: keep the timeout above that.
DEFAULT_TIMEOUT_SECONDS = 60.0

#: Sent with every request; the gateway refuses a POST without a JSON content type.
_JSON_HEADERS = {"content-type": "application/json", "accept": "application/json, application/problem+json"}

#: What a decorated function becomes, for type checkers: it takes the business arguments
#: (the signature, without `idempotency_key`, is kept for introspection) and returns the
#: outcome the model should read.
SideEffectFunction = Callable[..., dict[str, Any]]
AsyncSideEffectFunction = Callable[..., Coroutine[Any, Any, dict[str, Any]]]
_ABSENT: Any = object()


def _headers(api_key: str | None) -> dict[str, str]:
    headers = dict(_JSON_HEADERS)
    if api_key is not None:
        headers["authorization"] = f"Bearer {api_key}"
    return headers


def _with_trace_context(headers: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """`headers` plus the current OpenTelemetry context as W3C `traceparent` and
    `tracestate`, when `opentelemetry` is installed and a span is current; `headers` as they
    are otherwise."""
    if _propagate is None:
        return headers
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    if not carrier:
        return headers
    return {**carrier, **(headers or {})}


def _grant_headers(idempotency_key: str | None, intent_id: str | None) -> dict[str, str]:
    """The headers of a call or a grant: the caller's `Idempotency-Key`, and the `Intent-Id`
    given, or else the one of the `intentgate.intent_id(...)` block around the call."""
    headers: dict[str, str] = {}
    if idempotency_key is not None:
        headers["idempotency-key"] = idempotency_key
    if intent_id is None:
        intent_id = current_intent_id()
    if intent_id is not None:
        headers["intent-id"] = intent_id
    return headers


def _settle_body(
    lease: str,
    outcome: str,
    result: Any,
    reason: str | None,
    external_id: str | None,
    resend_stop: ResendStop | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"lease": lease, "outcome": outcome}
    if result is not _ABSENT:
        body["result"] = result
    if reason is not None:
        body["reason"] = reason
    if external_id is not None:
        body["external_id"] = external_id
    if resend_stop is not None:
        body["resend_stop"] = resend_stop
    return body


def _parse(response: httpx.Response) -> Any:
    """The parsed body of `response`; raises `IntentGateError` for a 4xx or 5xx."""
    return _parse_answer(response.status_code, response.content)


def _parse_answer(status: int, content: bytes) -> Any:
    """The parsed body of an answer; raises `IntentGateError` for a 4xx or 5xx."""
    try:
        body = _json.loads(content) if content else None
    except ValueError:
        body = content.decode("utf-8", errors="replace")
    if status >= 400:
        raise error_from_response(status, body)
    return body


def _intent_path(intent_id: int | str, action: str = "") -> str:
    return f"/v1/intents/{intent_id}{'/' + action if action else ''}"


class Client:
    """A blocking client of the gateway at `base_url` (`http://127.0.0.1:8080`).

    `api_key` is sent as `Authorization: Bearer <key>` (leave it out for a gateway with
    `auth: none`). `timeout` is the HTTP timeout in seconds (see `DEFAULT_TIMEOUT_SECONDS`).
    `transport` replaces httpx's (tests pass an `httpx.MockTransport`). Without one, requests
    go over kept-alive HTTP/1.1 connections of the client's own (a fraction of httpx's cost
    per request, and of the standard library's `http.client`), unless a proxy from the environment applies to the gateway,
    which httpx then uses; failures are httpx's exceptions either way. The client is
    thread-safe; close it with `close()` or use it with `with`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        base_url = base_url.rstrip("/")
        self._renewals = _Renewals(self)
        self._connections: Connections | None = None
        self._http: httpx.Client | None = None
        if transport is None and stdlib_usable(base_url):
            self._connections = Connections(base_url, _headers(api_key), timeout)
        else:
            self._http = httpx.Client(base_url=base_url, headers=_headers(api_key), timeout=timeout, transport=transport)

    def close(self) -> None:
        """Closes the connections, and ends the thread that renews leases."""
        self._renewals.close()
        if self._connections is not None:
            self._connections.close()
        if self._http is not None:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _request(self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None) -> Any:
        content = None if body is None else _json.dumps(body)
        headers = _with_trace_context(headers)
        if self._connections is not None:
            return _parse_answer(*self._connections.request(method, path, content, headers))
        assert self._http is not None
        return _parse(self._http.request(method, path, content=content, headers=headers))

    def tools(self) -> list[dict[str, Any]]:
        """`GET /v1/tools`: the tools the caller may use, with `executor` for each."""
        return cast(list[dict[str, Any]], self._request("GET", "/v1/tools")["tools"])

    def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        intent_id: str | None = None,
    ) -> dict[str, Any]:
        """`POST /v1/tools/{tool}/call`: the gateway runs the tool; answers its outcome
        (`status`, `message`, `result`, ...). `idempotency_key` is sent as the
        `Idempotency-Key` header; `intent_id` as `Intent-Id`, and without it the id of the
        `intentgate.intent_id(...)` block around the call, if any."""
        return cast(
            dict[str, Any],
            self._request(
                "POST", f"/v1/tools/{tool}/call", {"arguments": arguments}, _grant_headers(idempotency_key, intent_id)
            ),
        )

    def grant(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        intent_id: str | None = None,
    ) -> dict[str, Any]:
        """`POST /v1/tools/{tool}/intents`: asks to run a client-executed tool. Answers
        `{"action": "answer", "outcome": {...}}`, or an `execute` or `look_up` grant with
        `intent_id`, `idempotency_key`, `attempt`, `resend` and `lease`. The headers are
        `call`'s."""
        return cast(
            dict[str, Any],
            self._request(
                "POST", f"/v1/tools/{tool}/intents", {"arguments": arguments}, _grant_headers(idempotency_key, intent_id)
            ),
        )

    def renew(self, intent_id: int | str, lease: str) -> dict[str, Any]:
        """`POST /v1/intents/{id}/renew`: extends the lease whose token is `lease`. Answers
        `{"lease": {...}}`; raises `LeaseLost` when the lease is no longer held."""
        return cast(dict[str, Any], self._request("POST", _intent_path(intent_id, "renew"), {"lease": lease}))

    def settle(
        self,
        intent_id: int | str,
        lease: str,
        outcome: str,
        *,
        result: Any = _ABSENT,
        reason: str | None = None,
        external_id: str | None = None,
        resend_stop: ResendStop | None = None,
    ) -> dict[str, Any]:
        """`POST /v1/intents/{id}/settle`: reports `outcome` (`done`, `rejected`,
        `not_executed`, `unknown` or `not_found`). `resend_stop` (with `unknown`, on an
        `execute` grant) says the provider will answer every same-key re-send the same way:
        the gateway then grants lookups only. Answers like `grant`; raises `LeaseLost` when
        the lease is no longer held (nothing was changed)."""
        body = _settle_body(lease, outcome, result, reason, external_id, resend_stop)
        return cast(dict[str, Any], self._request("POST", _intent_path(intent_id, "settle"), body))

    def intent(self, intent_id: int | str) -> dict[str, Any]:
        """`GET /v1/intents/{id}`: the intent as the ledger holds it (scope `intents:read`)."""
        return cast(dict[str, Any], self._request("GET", _intent_path(intent_id)))

    def side_effect(
        self,
        tool: str,
        *,
        ambiguous: ExceptionTypes = (),
        not_processed: ExceptionTypes = (),
        rejected: ExceptionTypes = (),
        lookup: Callable[..., Any] | None = None,
        external_id: ExternalId = None,
        resend_stop: ResendStopOf = None,
    ) -> Callable[[Callable[..., Any]], SideEffectFunction]:
        """Runs the decorated function as the client-executed tool `tool`, at most once per
        intent whatever the retries. The function takes `idempotency_key` (the provider key
        of the intent, to send to the provider); the wrapper doesn't, and returns the
        outcome the model should read. See the package's README for each branch.

        For a tool whose key uses `{intent_id}`, call the function inside an
        `intentgate.intent_id(...)` block: the id set there when the call starts is sent
        with every grant of the call. Without one the gateway runs nothing, and the function
        returns its `invalid_arguments` outcome with `reason` `MISSING_INTENT_ID`.

        `resend_stop(error)` is asked about an exception settled `unknown`: a `ResendStop`
        word when the provider will answer every same-key re-send the same way (a stored
        5xx it replays, a 5xx it says not to retry, a key it holds for other parameters),
        so the gateway stops granting re-sends of the intent and grants lookups only; None
        otherwise. If it raises or answers another word, the outcome is settled without it
        and that error is raised after."""

        def decorate(function: Callable[..., Any]) -> SideEffectFunction:
            if inspect.iscoroutinefunction(function):
                raise TypeError(f"{function.__qualname__} is async: decorate it with AsyncClient.side_effect")
            effect = SideEffect.of(
                tool,
                function,
                ambiguous=ambiguous,
                not_processed=not_processed,
                rejected=rejected,
                lookup=lookup,
                external_id=external_id,
                resend_stop=resend_stop,
            )

            def wrapper(*args: Any, **kwargs: Any) -> dict[str, Any]:
                return self._run(effect, effect.bind(args, kwargs))

            return cast(SideEffectFunction, effect.wrap(wrapper))

        return decorate

    # The exchange of a decorated function.

    def _run(self, effect: SideEffect, call: Call) -> dict[str, Any]:
        answer = self.grant(effect.tool, call.arguments, intent_id=call.intent_id)
        for _ in range(MAX_ROUNDS):
            action = answer.get("action")
            if action == "answer":
                return cast(dict[str, Any], answer["outcome"])
            if action == "execute":
                answer = self._execute(effect, call, answer)
            elif action == "look_up":
                answer = self._look_up(effect, call, answer)
            else:
                raise IntentGateError(200, title="Unexpected answer", detail=f"unknown action {action!r}")
        raise TooManyRounds(f"{effect.tool}: no answer after {MAX_ROUNDS} rounds")

    def _execute(self, effect: SideEffect, call: Call, grant: dict[str, Any]) -> dict[str, Any]:
        key = grant["idempotency_key"]
        renewer = self._renewals.start(grant["intent_id"], grant["lease"])
        try:
            value = effect.function(*call.args, **call.kwargs, **{KEY_PARAMETER: key})
        except Exception as error:
            renewer.stop()
            outcome, fields, stop_error = effect.failure_fields(error)
            answer = self._settle(effect, call, grant, outcome, **fields)
            if stop_error is not None:
                raise stop_error from error
            if outcome == "unknown" and is_pending_unknown(answer):
                # The gateway grants the lookup of an unknown intent to the next caller.
                answer = self.grant(effect.tool, call.arguments, intent_id=call.intent_id)
            return answer
        except BaseException:
            # KeyboardInterrupt, SystemExit: the lease runs out and the next caller looks
            # the intent up.
            renewer.stop()
            raise
        renewer.stop()
        fields, encoding_error = done_fields(effect, value)
        answer = self._settle(effect, call, grant, "done", **fields)
        if encoding_error is not None:
            raise encoding_error
        return answer

    def _look_up(self, effect: SideEffect, call: Call, grant: dict[str, Any]) -> dict[str, Any]:
        if effect.lookup is None:
            return self._settle(effect, call, grant, "unknown", reason="no lookup is configured in the client")
        try:
            record = effect.lookup(**effect.lookup_arguments(call, grant["idempotency_key"]))
        except Exception as error:
            return self._settle(effect, call, grant, "unknown", reason=f"lookup failed: {reason_of(error)}")
        if record is None:
            return self._settle(effect, call, grant, "not_found")
        fields, encoding_error = done_fields(effect, record)
        answer = self._settle(effect, call, grant, "done", **fields)
        if encoding_error is not None:
            raise encoding_error
        return answer

    def _settle(self, effect: SideEffect, call: Call, grant: dict[str, Any], outcome: str, **fields: Any) -> dict[str, Any]:
        """Settles, sending again when the gateway can't be reached, and without the result
        when the gateway refuses it as too large (the effect happened all the same); on
        `LeaseLost` asks for a grant again and answers that."""
        for attempt in range(1, SETTLE_ATTEMPTS + 1):
            try:
                return self.settle(grant["intent_id"], grant["lease"]["token"], outcome, **fields)
            except LeaseLost:
                return self.grant(effect.tool, call.arguments, intent_id=call.intent_id)
            except IntentGateError as error:
                if not result_too_large(error, fields):
                    raise
                fields.pop("result")
            except httpx.TransportError:
                if attempt == SETTLE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")


class _Lease:
    """One lease renewed by `_Renewals` while its body runs."""

    def __init__(self, renewals: _Renewals, intent_id: int | str, lease: Mapping[str, Any]) -> None:
        self.renewals = renewals
        self.intent_id = intent_id
        self.lease = lease
        self.due = time.monotonic() + renew_interval_seconds(lease)
        self.stopped = False

    def stop(self) -> None:
        """Stops renewing; returns once no renewal of this lease is in flight."""
        self.renewals.stop(self)


#: How long the renewal thread waits for a new lease once none is left, before it ends (the
#: next lease starts it again).
RENEWALS_IDLE_SECONDS = 30.0

#: Longest the renewal thread sleeps between looks at its leases. A lease started later than
#: that before its renewal is due (any of a few seconds or more) is found at the next look,
#: without waking the thread: waking it for every call cost a short call a thread switch and
#: the GIL handed back and forth, more than the rest of the decorator's own work.
RENEWALS_LOOK_SECONDS = 1.0


class _Renewals:
    """Renews the leases of a client's running bodies, from one thread started at the first
    lease (a thread per call would cost more than a short call's whole exchange) and ended
    after `RENEWALS_IDLE_SECONDS` without a lease, or by `close()`. A lost lease is dropped;
    a failed renewal is tried again at the next interval."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._leases: set[_Lease] = set()
        self._renewing: _Lease | None = None
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: When the thread looks at its leases next, unless woken (`time.monotonic()`).
        self._next_look = 0.0

    def start(self, intent_id: int | str, lease: Mapping[str, Any]) -> _Lease:
        entry = _Lease(self, intent_id, lease)
        with self._changed:
            self._leases.add(entry)
            # A lease after `close()` is renewed all the same, by the thread still ending or
            # a new one.
            self._closed = False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="intentgate-renewals", daemon=True)
                self._thread.start()
            elif entry.due < self._next_look:
                self._changed.notify()
        return entry

    def stop(self, entry: _Lease) -> None:
        with self._changed:
            entry.stopped = True
            self._leases.discard(entry)
            while self._renewing is entry:
                self._changed.wait()

    def close(self) -> None:
        """Ends the thread (at once, or after the renewal it is sending)."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._changed:
                entry = self._next_due()
                if entry is None:
                    self._thread = None
                    return
                self._renewing = entry
            try:
                entry.lease = self._client.renew(entry.intent_id, entry.lease["token"])["lease"]
            except LeaseLost:
                entry.stopped = True
            except (httpx.HTTPError, IntentGateError, KeyError, TypeError):
                pass
            with self._changed:
                self._renewing = None
                if entry.stopped:
                    self._leases.discard(entry)
                else:
                    entry.due = time.monotonic() + renew_interval_seconds(entry.lease)
                self._changed.notify_all()

    def _next_due(self) -> _Lease | None:
        """Waits (holding `_changed`) until a lease is due and answers it; None once closed,
        or after `RENEWALS_IDLE_SECONDS` without a lease."""
        idle_since = time.monotonic()
        while not self._closed:
            now = time.monotonic()
            first = min(self._leases, key=lambda entry: entry.due, default=None)
            if first is None:
                left = idle_since + RENEWALS_IDLE_SECONDS - now
                if left <= 0:
                    return None
                self._sleep(now, left)
                continue
            idle_since = now
            if first.due <= now:
                return first
            self._sleep(now, first.due - now)
        return None

    def _sleep(self, now: float, seconds: float) -> None:
        """Waits (holding `_changed`) up to `seconds`, at most `RENEWALS_LOOK_SECONDS`, or
        until woken by a lease due sooner or by `close()`."""
        seconds = min(seconds, RENEWALS_LOOK_SECONDS)
        self._next_look = now + seconds
        self._changed.wait(seconds)
        # Woken early or not, a lease started from now on before the next look wakes it.
        self._next_look = 0.0


class AsyncClient:
    """The asyncio twin of `Client`: the same constructor and methods, as coroutines, and a
    `side_effect` decorator for `async def` functions (renewing the lease from a task)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=_headers(api_key), timeout=timeout, transport=transport
        )

    async def aclose(self) -> None:
        """Closes the connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _request(self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None) -> Any:
        content = None if body is None else _json.dumps(body)
        return _parse(await self._http.request(method, path, content=content, headers=_with_trace_context(headers)))

    async def tools(self) -> list[dict[str, Any]]:
        """`GET /v1/tools` (see `Client.tools`)."""
        return cast(list[dict[str, Any]], (await self._request("GET", "/v1/tools"))["tools"])

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        intent_id: str | None = None,
    ) -> dict[str, Any]:
        """`POST /v1/tools/{tool}/call` (see `Client.call`)."""
        path = f"/v1/tools/{tool}/call"
        answer = await self._request("POST", path, {"arguments": arguments}, _grant_headers(idempotency_key, intent_id))
        return cast(dict[str, Any], answer)

    async def grant(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        intent_id: str | None = None,
    ) -> dict[str, Any]:
        """`POST /v1/tools/{tool}/intents` (see `Client.grant`)."""
        path = f"/v1/tools/{tool}/intents"
        answer = await self._request("POST", path, {"arguments": arguments}, _grant_headers(idempotency_key, intent_id))
        return cast(dict[str, Any], answer)

    async def renew(self, intent_id: int | str, lease: str) -> dict[str, Any]:
        """`POST /v1/intents/{id}/renew` (see `Client.renew`)."""
        return cast(dict[str, Any], await self._request("POST", _intent_path(intent_id, "renew"), {"lease": lease}))

    async def settle(
        self,
        intent_id: int | str,
        lease: str,
        outcome: str,
        *,
        result: Any = _ABSENT,
        reason: str | None = None,
        external_id: str | None = None,
        resend_stop: ResendStop | None = None,
    ) -> dict[str, Any]:
        """`POST /v1/intents/{id}/settle` (see `Client.settle`)."""
        body = _settle_body(lease, outcome, result, reason, external_id, resend_stop)
        return cast(dict[str, Any], await self._request("POST", _intent_path(intent_id, "settle"), body))

    async def intent(self, intent_id: int | str) -> dict[str, Any]:
        """`GET /v1/intents/{id}` (see `Client.intent`)."""
        return cast(dict[str, Any], await self._request("GET", _intent_path(intent_id)))

    def side_effect(
        self,
        tool: str,
        *,
        ambiguous: ExceptionTypes = (),
        not_processed: ExceptionTypes = (),
        rejected: ExceptionTypes = (),
        lookup: Callable[..., Any] | None = None,
        external_id: ExternalId = None,
        resend_stop: ResendStopOf = None,
    ) -> Callable[[Callable[..., Any]], AsyncSideEffectFunction]:
        """`Client.side_effect` for `async def` functions. `lookup` may be a plain function
        or a coroutine function."""

        def decorate(function: Callable[..., Any]) -> AsyncSideEffectFunction:
            if not inspect.iscoroutinefunction(function):
                raise TypeError(f"{function.__qualname__} is not async: decorate it with Client.side_effect")
            effect = SideEffect.of(
                tool,
                function,
                ambiguous=ambiguous,
                not_processed=not_processed,
                rejected=rejected,
                lookup=lookup,
                external_id=external_id,
                resend_stop=resend_stop,
            )

            async def wrapper(*args: Any, **kwargs: Any) -> dict[str, Any]:
                return await self._run(effect, effect.bind(args, kwargs))

            return cast(AsyncSideEffectFunction, effect.wrap(wrapper))

        return decorate

    async def _run(self, effect: SideEffect, call: Call) -> dict[str, Any]:
        answer = await self.grant(effect.tool, call.arguments, intent_id=call.intent_id)
        for _ in range(MAX_ROUNDS):
            action = answer.get("action")
            if action == "answer":
                return cast(dict[str, Any], answer["outcome"])
            if action == "execute":
                answer = await self._execute(effect, call, answer)
            elif action == "look_up":
                answer = await self._look_up(effect, call, answer)
            else:
                raise IntentGateError(200, title="Unexpected answer", detail=f"unknown action {action!r}")
        raise TooManyRounds(f"{effect.tool}: no answer after {MAX_ROUNDS} rounds")

    async def _execute(self, effect: SideEffect, call: Call, grant: dict[str, Any]) -> dict[str, Any]:
        key = grant["idempotency_key"]
        renewer = asyncio.create_task(self._renew(grant["intent_id"], grant["lease"]))
        try:
            value = await effect.function(*call.args, **call.kwargs, **{KEY_PARAMETER: key})
        except Exception as error:
            await _stop(renewer)
            outcome, fields, stop_error = effect.failure_fields(error)
            answer = await self._settle(effect, call, grant, outcome, **fields)
            if stop_error is not None:
                raise stop_error from error
            if outcome == "unknown" and is_pending_unknown(answer):
                answer = await self.grant(effect.tool, call.arguments, intent_id=call.intent_id)
            return answer
        except BaseException:
            # Cancelled: the lease runs out and the next caller looks the intent up.
            renewer.cancel()
            raise
        await _stop(renewer)
        fields, encoding_error = done_fields(effect, value)
        answer = await self._settle(effect, call, grant, "done", **fields)
        if encoding_error is not None:
            raise encoding_error
        return answer

    async def _look_up(self, effect: SideEffect, call: Call, grant: dict[str, Any]) -> dict[str, Any]:
        if effect.lookup is None:
            return await self._settle(effect, call, grant, "unknown", reason="no lookup is configured in the client")
        try:
            record = effect.lookup(**effect.lookup_arguments(call, grant["idempotency_key"]))
            if inspect.isawaitable(record):
                record = await record
        except Exception as error:
            return await self._settle(effect, call, grant, "unknown", reason=f"lookup failed: {reason_of(error)}")
        if record is None:
            return await self._settle(effect, call, grant, "not_found")
        fields, encoding_error = done_fields(effect, record)
        answer = await self._settle(effect, call, grant, "done", **fields)
        if encoding_error is not None:
            raise encoding_error
        return answer

    async def _settle(
        self, effect: SideEffect, call: Call, grant: dict[str, Any], outcome: str, **fields: Any
    ) -> dict[str, Any]:
        """`Client._settle` for asyncio."""
        for attempt in range(1, SETTLE_ATTEMPTS + 1):
            try:
                return await self.settle(grant["intent_id"], grant["lease"]["token"], outcome, **fields)
            except LeaseLost:
                return await self.grant(effect.tool, call.arguments, intent_id=call.intent_id)
            except IntentGateError as error:
                if not result_too_large(error, fields):
                    raise
                fields.pop("result")
            except httpx.TransportError:
                if attempt == SETTLE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    async def _renew(self, intent_id: int | str, lease: Mapping[str, Any]) -> None:
        """Renews `lease` until cancelled or lost (see `_Renewals`)."""
        while True:
            await asyncio.sleep(renew_interval_seconds(lease))
            try:
                lease = (await self.renew(intent_id, lease["token"]))["lease"]
            except LeaseLost:
                return
            except (httpx.HTTPError, IntentGateError, KeyError, TypeError):
                continue


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancels a renewal task and waits for it to end."""
    task.cancel()
    await asyncio.wait([task])
