"""The errors the client raises for the gateway's `application/problem+json` answers."""

from __future__ import annotations

from typing import Any

__all__ = ["IntentGateError", "LeaseLost", "TooManyRounds"]

#: The prefix of every problem type the gateway sends (`urn:intentgate:problem:lease-lost`).
PROBLEM_TYPE_PREFIX = "urn:intentgate:problem:"


class IntentGateError(Exception):
    """The gateway answered a 4xx or 5xx. The fields are those of its problem+json body
    (RFC 9457): `status` (the HTTP status), `type` (`urn:intentgate:problem:<kind>`),
    `title` and `detail` (what is wrong and how to fix it). `problem` is the whole body
    as parsed, `{}` when the answer was not problem+json."""

    def __init__(
        self,
        status: int,
        type: str = "about:blank",
        title: str = "",
        detail: str = "",
        problem: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail
        self.problem: dict[str, Any] = problem if problem is not None else {}
        super().__init__(f"{status} {title or type}: {detail}" if detail else f"{status} {title or type}")

    @property
    def kind(self) -> str:
        """The short name of the problem (`lease-lost`), or the whole type when it is not
        one of the gateway's."""
        return self.type.removeprefix(PROBLEM_TYPE_PREFIX)


class LeaseLost(IntentGateError):
    """409 `lease-lost`: the lease sent with a renew or settle is no longer the intent's
    (it expired and another caller took the intent, or the intent was settled). Nothing
    was changed. Ask for a grant again to learn where the intent stands."""


class TooManyRounds(RuntimeError):
    """A decorated side effect went through more grant, settle and re-send rounds than its
    bound without the gateway answering. The intent is in the gateway's ledger; a later
    call of the same function picks it up where it stands."""


def error_from_response(status: int, body: Any) -> IntentGateError:
    """The typed error of a 4xx or 5xx answer whose body parsed to `body`."""
    problem = body if isinstance(body, dict) else {}
    type_ = str(problem.get("type", "about:blank"))
    title = str(problem.get("title", ""))
    detail = str(problem.get("detail", "")) if problem else (str(body) if body else "")
    cls = LeaseLost if status == 409 and type_.removeprefix(PROBLEM_TYPE_PREFIX) == "lease-lost" else IntentGateError
    return cls(status, type_, title, detail, problem)
