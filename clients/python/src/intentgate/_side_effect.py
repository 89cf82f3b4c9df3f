"""What the `side_effect` decorators of `Client` and `AsyncClient` share: the signature the
wrapper shows, the arguments it sends, how an exception of the body is reported, and what
a settle carries. The exchange itself (grant, run, renew, settle) is in `_client.py`, once
for blocking code and once for asyncio."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from intentgate._errors import IntentGateError
from intentgate._intent_id import current_intent_id
from intentgate._json import to_json_value

#: The parameter through which a decorated body receives the provider key of its intent.
KEY_PARAMETER = "idempotency_key"

#: How many grant, settle and re-send rounds one call of a decorated function may go
#: through. A round is one execute or one look-up; the usual worst case is execute
#: (unknown), look-up (not found), re-send, look-up again: four.
MAX_ROUNDS = 8

#: How many times a settle is sent again when the gateway could not be reached. The
#: lease is still held meanwhile; a settle that did arrive answers 409 to the repeat,
#: and the decorator then asks for a grant to learn where the intent stands.
SETTLE_ATTEMPTS = 3

#: The problem the gateway answers (422) for a settled result over its limit (64 KiB).
RESULT_TOO_LARGE = "too-large"

#: The part of a lease's `duration_ms` after which the lease is renewed while the body
#: runs: a third, so two renewals in a row can fail before the lease runs out.
RENEW_FRACTION = 3

#: The shortest pause between two renewals, in seconds.
RENEW_INTERVAL_MIN_SECONDS = 0.05

ExceptionTypes = type[BaseException] | tuple[type[BaseException], ...]
ExternalId = Callable[[Any], Any] | str | None

#: The `reason` of an `invalid_arguments` outcome whose call lacked the application's intent
#: id: the tool's key uses `{intent_id}` (its listing says `needs_intent_id`), and only the
#: application can send one (an `intentgate.intent_id(...)` block around the call,
#: `intent_id=`, the `Intent-Id` header). Nothing was done, and the same call gets the same
#: answer: its message tells the model to tell the user rather than retry.
MISSING_INTENT_ID = "missing_intent_id"

#: Why same-key re-sends of an intent stop for good, as the settle of an `unknown` outcome
#: says it (`resend_stop`): the provider will answer every re-send of the key the same way.
#: `replayed_server_error`: it replays a stored 5xx for the key (Stripe's
#: `Idempotent-Replayed: true`); `provider_says_no_retry`: it answered a 5xx and said not to
#: retry (`Stripe-Should-Retry: false`); `key_reused`: it holds the key for a request with
#: other parameters (Stripe's 400 `idempotency_error`).
ResendStop = Literal["replayed_server_error", "provider_says_no_retry", "key_reused"]
RESEND_STOPS: frozenset[str] = frozenset(get_args(ResendStop))
#: What the decorator's `resend_stop` is: the reason an exception of the body says, or None.
ResendStopOf = Callable[[BaseException], ResendStop | None] | None


def renew_interval_seconds(lease: Mapping[str, Any]) -> float:
    """How long to wait before renewing `lease` (a grant's or renewal's `lease` object)."""
    duration_ms = int(lease.get("duration_ms", 0))
    return max(duration_ms / RENEW_FRACTION / 1000, RENEW_INTERVAL_MIN_SECONDS)


def _as_tuple(types: ExceptionTypes) -> tuple[type[BaseException], ...]:
    return types if isinstance(types, tuple) else (types,)


@dataclass(frozen=True)
class Call:
    """One call of a decorated function: the arguments as the gateway gets them, and as the
    body and the lookup get them back."""

    #: The business arguments by name, defaults applied, as JSON values (`Decimal` as text).
    arguments: dict[str, Any]
    #: Positional and keyword arguments for the body, without the key.
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    #: The business arguments by name, as the caller passed them (for the lookup).
    by_name: dict[str, Any]
    #: The application's intent id around the call (`intentgate.intent_id`), read once when
    #: the call is bound so that every grant of the call's rounds sends the same one.
    intent_id: str | None = None


@dataclass(frozen=True)
class SideEffect:
    """The decorated function and how its outcomes map onto the intent API's."""

    tool: str
    function: Callable[..., Any]
    signature: inspect.Signature
    ambiguous: tuple[type[BaseException], ...]
    not_processed: tuple[type[BaseException], ...]
    rejected: tuple[type[BaseException], ...]
    lookup: Callable[..., Any] | None
    lookup_takes_key: bool
    external_id: ExternalId
    resend_stop: ResendStopOf = None

    @classmethod
    def of(
        cls,
        tool: str,
        function: Callable[..., Any],
        *,
        ambiguous: ExceptionTypes,
        not_processed: ExceptionTypes,
        rejected: ExceptionTypes,
        lookup: Callable[..., Any] | None,
        external_id: ExternalId,
        resend_stop: ResendStopOf = None,
    ) -> SideEffect:
        """Checks `function` and builds the signature the wrapper shows: the function's own
        without `idempotency_key`. Raises `TypeError` for a function that can't take the key
        by name or that takes `*args` (arguments must have names to be sent)."""
        signature = inspect.signature(function)
        key = signature.parameters.get(KEY_PARAMETER)
        if key is None or key.kind not in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            raise TypeError(
                f"{function.__qualname__} must take `{KEY_PARAMETER}` by name: the decorator passes "
                "the intent's provider key through it"
            )
        if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in signature.parameters.values()):
            raise TypeError(f"{function.__qualname__} takes *args; every argument needs a name to be sent")
        public = signature.replace(parameters=[p for p in signature.parameters.values() if p.name != KEY_PARAMETER])
        lookup_takes_key = False
        if lookup is not None:
            lookup_takes_key = KEY_PARAMETER in inspect.signature(lookup).parameters
        return cls(
            tool=tool,
            function=function,
            signature=public,
            ambiguous=_as_tuple(ambiguous),
            not_processed=_as_tuple(not_processed),
            rejected=_as_tuple(rejected),
            lookup=lookup,
            lookup_takes_key=lookup_takes_key,
            external_id=external_id,
            resend_stop=resend_stop,
        )

    def wrap(self, wrapper: Callable[..., Any]) -> Callable[..., Any]:
        """Gives `wrapper` the function's name, docstring and module, and its signature and
        annotations without `idempotency_key`, so agent frameworks see only the business
        arguments."""
        functools.update_wrapper(wrapper, self.function)
        wrapper.__signature__ = self.signature  # type: ignore[attr-defined]
        wrapper.__annotations__ = {
            name: value for name, value in getattr(self.function, "__annotations__", {}).items() if name != KEY_PARAMETER
        }
        return wrapper

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
        """Binds a call to the public signature, defaults applied. Raises `TypeError` for
        arguments the function doesn't take, for `idempotency_key` passed by the caller, and
        for a `float` anywhere in the arguments, before anything is sent."""
        if KEY_PARAMETER in kwargs:
            raise TypeError(f"{self.function.__qualname__}: `{KEY_PARAMETER}` comes from the gateway, not the caller")
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        by_name: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if self.signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                by_name.update(value)
            else:
                by_name[name] = value
        arguments = to_json_value(by_name, "arguments")
        return Call(
            arguments=arguments,
            args=bound.args,
            kwargs=dict(bound.kwargs),
            by_name=by_name,
            intent_id=current_intent_id(),
        )

    def classify(self, error: BaseException) -> str:
        """The settle outcome of an exception raised by the body. `ambiguous` is checked
        first, so an exception listed there is never taken for a refusal; anything not listed
        is `unknown`, since an error of a side effect proves nothing about whether it
        happened."""
        if isinstance(error, self.ambiguous):
            return "unknown"
        if isinstance(error, self.rejected):
            return "rejected"
        if isinstance(error, self.not_processed):
            return "not_executed"
        return "unknown"

    def failure_fields(self, error: BaseException) -> tuple[str, dict[str, Any], Exception | None]:
        """The settle outcome and fields of an exception raised by the body, and the error
        to raise after settling when `resend_stop` failed on it (raised, or answered a word
        the gateway does not take): the body's outcome is settled without the reason then,
        so the intent is not left to its lease's expiry."""
        outcome = self.classify(error)
        fields: dict[str, Any] = {"reason": reason_of(error)}
        if outcome != "unknown" or self.resend_stop is None:
            return outcome, fields, None
        try:
            stop = self.resend_stop(error)
        except Exception as failed:
            return outcome, fields, failed
        if stop is None:
            return outcome, fields, None
        if stop not in RESEND_STOPS:
            return outcome, fields, ValueError(f"resend_stop answered {stop!r}; it may answer None or one of {sorted(RESEND_STOPS)}")
        fields["resend_stop"] = stop
        return outcome, fields, None

    def external_id_of(self, value: Any) -> str | None:
        """The provider's id of a result: `external_id(value)` for a callable, `value[key]`
        for a key, `None` when not configured or absent."""
        if self.external_id is None:
            return None
        if callable(self.external_id):
            found = self.external_id(value)
        elif isinstance(value, Mapping):
            found = value.get(self.external_id)
        else:
            found = None
        return None if found is None else str(found)

    def lookup_arguments(self, call: Call, key: str) -> dict[str, Any]:
        """The keyword arguments of the lookup: the function's arguments, and the key when
        the lookup's signature names `idempotency_key`."""
        if self.lookup_takes_key:
            return {**call.by_name, KEY_PARAMETER: key}
        return dict(call.by_name)


def reason_of(error: BaseException) -> str:
    """The text a settle reports for an exception: its message, or its type's name."""
    text = str(error).strip()
    return text if text else type(error).__name__


def done_fields(effect: SideEffect, value: Any) -> tuple[dict[str, Any], TypeError | ValueError | None]:
    """The settle fields of a `done` with `value` as its result, and the encoding error to
    raise after settling when `value` can't be sent as JSON (a `float`, an object). The
    effect happened either way, so the intent is settled `done` without a result first."""
    fields: dict[str, Any] = {}
    external_id = effect.external_id_of(value)
    if external_id is not None:
        fields["external_id"] = external_id
    try:
        fields["result"] = to_json_value(value, "result")
    except (TypeError, ValueError) as error:
        return fields, error
    return fields, None


def is_pending_unknown(answer: Mapping[str, Any]) -> bool:
    """True for an `answer` whose outcome is `pending_unknown`."""
    outcome = answer.get("outcome")
    return answer.get("action") == "answer" and isinstance(outcome, Mapping) and outcome.get("status") == "pending_unknown"


def result_too_large(error: IntentGateError, fields: Mapping[str, Any]) -> bool:
    """True when a settle carrying a result was refused because the result is over the
    gateway's limit: settle again without it."""
    return error.status == 422 and error.kind == RESULT_TOO_LARGE and "result" in fields
