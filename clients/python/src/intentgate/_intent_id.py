"""The application's intent id: the id the calling application creates once per business
request (a charge the user asked for), for the tools whose key uses `{intent_id}`.

The model never supplies it, so it is not an argument of a decorated function. The
application sets it around the code that serves the request, with `intent_id(...)`, and
every call made inside sends it (the `Intent-Id` header). It is held in a `ContextVar`: an
asyncio task sees the id of the code that created it, a framework that runs tools in a
thread pool with the caller's context (LangChain and LangGraph do) sees it too, and it
never leaks from one request into another."""

from __future__ import annotations

from contextvars import ContextVar, Token

__all__ = ["INTENT_ID_LENGTH_MAX", "current_intent_id", "intent_id"]

#: The longest intent id the gateway takes, in characters (the `Intent-Id` header's limit).
INTENT_ID_LENGTH_MAX = 256

#: The intent id of the business request being served in this context, or None.
_CURRENT: ContextVar[str | None] = ContextVar("intentgate_intent_id", default=None)


def _checked(value: object) -> str:
    """`value` when it can be sent as an `Intent-Id` header the gateway reads unchanged: a
    string of 1 to `INTENT_ID_LENGTH_MAX` printable ASCII characters, with no space at
    either end (the gateway trims the header). Raises before anything is sent otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"an intent id is a str, got {type(value).__name__}")
    if not 1 <= len(value) <= INTENT_ID_LENGTH_MAX:
        raise ValueError(f"an intent id is 1 to {INTENT_ID_LENGTH_MAX} characters, got {len(value)}")
    if not all(" " <= character <= "~" for character in value) or value != value.strip():
        raise ValueError(f"an intent id is printable ASCII with no space at either end, got {value!r}")
    return value


class intent_id:  # noqa: N801 - used like a function: `with intentgate.intent_id(...):`
    """Serves one business request under the intent id `value`: inside the `with` block,
    every decorated function (and `call` or `grant` without `intent_id=`) sends it, so a
    tool whose key uses `{intent_id}` makes one intent of the request however often it is
    retried inside the block. Create the id once per request of the user, in your
    application (never from the model's arguments, never per attempt), and serve every
    retry of that request under the same id. Blocks nest; the innermost id counts.

    Threads you start yourself don't inherit it: enter the block in the thread, or run the
    thread's work with `contextvars.copy_context().run`. Raises `TypeError` or `ValueError`
    for an id the gateway can't take (see `INTENT_ID_LENGTH_MAX`).

    It is a context manager only, not a decorator: a function decorated with one id would
    send that id for every request it ever serves, making them all one intent."""

    __slots__ = ("_token", "_value")

    def __init__(self, value: str) -> None:
        self._value = _checked(value)
        self._token: Token[str | None] | None = None

    def __enter__(self) -> str:
        if self._token is not None:
            raise RuntimeError("this intent_id block is already in use: make one per request")
        self._token = _CURRENT.set(self._value)
        return self._value

    def __exit__(self, *_exception: object) -> None:
        assert self._token is not None, "__exit__ without __enter__"
        _CURRENT.reset(self._token)
        self._token = None


def current_intent_id() -> str | None:
    """The intent id set by the innermost `intent_id(...)` block around this code, or None."""
    return _CURRENT.get()
