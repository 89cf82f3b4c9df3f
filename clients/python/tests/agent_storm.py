"""The four-layer retry storm run through an agent framework (the OpenAI Agents SDK, Pydantic
AI): the decorated refund tool is handed to the framework, and a scripted model (no LLM)
asks for it from the framework's own tool-call path, while the mock provider times out,
answers 500s that committed anyway, drops connections and rate-limits.

Each intent (one refund) gets `CALLS_PER_INTENT` calls of the tool, from four layers and
the model's parallel calls:

- **the user** asks `USER_ASKS` times at once (a new conversation each time);
- **the framework's run** fails after its tools ran (the model's API fails the run's last
  request) and is run again whole, `RUN_ATTEMPTS` in all, as an application's or a durable
  executor's retry of a failed run does;
- **the model** calls the tool in `MODEL_TURNS` turns, calling it again after reading the
  answer;
- each of those responses carries the call `PARALLEL_CALLS` times (parallel tool calls with
  their own call ids), and the framework runs them at once;
- **the HTTP client** inside the tool re-sends a failed provider request `HTTP_RETRIES` times
  with the same key (`refund_tool(http_retries=...)`), as provider SDKs do.

What is checked is what the model was shown, parsed from the framework's tool messages,
against the provider's own effect log: exactly one effect per intent, and no answer that
contradicts it. A framework's test module supplies an `Ask`: one run of its agent, whose
model follows a `Script`."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from processes import Mock

#: Intents in the storm, and the copies of one call each layer makes (see above).
INTENTS = 6
USER_ASKS = 2
RUN_ATTEMPTS = 2
MODEL_TURNS = 2
PARALLEL_CALLS = 2
CALLS_PER_INTENT = USER_ASKS * RUN_ATTEMPTS * MODEL_TURNS * PARALLEL_CALLS
HTTP_RETRIES = 1
AMOUNT = "5.00"
#: How long the intents get to be settled once the faults stop (lookups of one intent are
#: at most one per 5 s, so a few rounds), and the pause between two asks of the user.
RECOVERY_SECONDS = 45
RECOVERY_PAUSE_SECONDS = 1.0
#: Threads that run the framework's blocking tool calls: enough for every call of the
#: storm at once (the OpenAI Agents SDK runs a `def` tool in asyncio's default executor,
#: whose default size is the number of cores plus 4).
TOOL_THREADS = INTENTS * USER_ASKS * PARALLEL_CALLS

#: The faults of the storms, in parts per thousand. Every ambiguous shape commits, so a
#: stored 500 is replayed as a 500 (to the HTTP client's re-send too) and only the lookup
#: can settle its intent.
FAULTS = {
    "timeout": 250,
    "dropped": 150,
    "server_error": 200,
    "rate_limited": 150,
    "commit_when_ambiguous": 1000,
    "lookup_failure": 100,
    "seed": 11,
}
#: Two storms: faults drawn for every request, and a provider that loses every intent's
#: first requests (timeouts that did not commit, the HTTP client's re-send included), so
#: every intent goes through the lookup (not found) and a same-key re-send.
STORMS = {
    "faults": FAULTS,
    "first-requests-lost": {**FAULTS, "first_timeouts_per_key": HTTP_RETRIES + 1},
}

#: What the model may be shown during the storm: the provider's faults leave an intent
#: unknown for a while (`pending_unknown`), and a rate limit is `not_executed`.
STORM_STATUSES = {"done", "already_done", "pending_unknown", "not_executed"}


class ModelUnavailable(Exception):
    """The model's API failed a request of the run (after the run's tools had run)."""


@dataclass
class Answer:
    """One tool answer as the model was shown it."""

    order_id: str
    #: The framework's id of the tool call.
    call_id: str
    #: When the model's response asking for the call was made, in Unix milliseconds.
    asked_ms: int
    #: The outcome, parsed from the tool message the model read.
    outcome: dict[str, Any]


@dataclass
class Script:
    """What the scripted model does in one run: `turns` responses each asking for the refund
    `copies` times, then a final answer, or `ModelUnavailable` when `fail_at_end`."""

    order_id: str
    #: Prefix of the run's call ids (unique per run).
    tag: str
    turns: int
    copies: int
    fail_at_end: bool
    #: Every tool answer the model read, appended as the model reads them.
    answers: list[Answer]
    #: When the model asked for each call id.
    asked_ms: dict[str, int] = field(default_factory=dict)

    def call_ids(self, turn: int) -> list[str]:
        """The call ids of the model's response in `turn` (0-based)."""
        ids = [f"{self.tag}-t{turn}-c{copy}" for copy in range(self.copies)]
        now = now_ms()
        for call_id in ids:
            self.asked_ms[call_id] = now
        return ids

    def read(self, call_id: str, outcome: dict[str, Any]) -> None:
        """Records the answer to `call_id` the model is shown."""
        self.answers.append(Answer(self.order_id, call_id, self.asked_ms[call_id], outcome))


#: One run of the framework's agent, as `ask(script)`; raises `ModelUnavailable` (or the
#: framework's wrapping of it, which `failed_run` recognises) when `script.fail_at_end`.
Ask = Callable[[Script], Awaitable[None]]


def now_ms() -> int:
    return int(time.time() * 1000)


def provider_key(order_id: str) -> str:
    """The provider key the gateway grants for an intent of the refund tool."""
    return f"refund_order:refund:{order_id}:{AMOUNT}"


async def storm(ask: Ask, orders: list[str]) -> list[Answer]:
    """Every layer's calls for every order in `orders`, all intents at once."""
    answers: list[Answer] = []

    async def user(order_id: str, ask_number: int) -> None:
        for attempt in range(RUN_ATTEMPTS):
            last = attempt + 1 == RUN_ATTEMPTS
            script = Script(order_id, f"{order_id}-u{ask_number}-r{attempt}", MODEL_TURNS, PARALLEL_CALLS, not last, answers)
            try:
                await ask(script)
            except ModelUnavailable:
                assert not last, "the run failed without being told to"
                continue
            assert last, "the run was told to fail and did not"

    await asyncio.gather(*(user(order_id, number) for order_id in orders for number in range(USER_ASKS)))
    return answers


async def recover(ask: Ask, orders: list[str]) -> dict[str, Answer]:
    """The user asks again (one call per run) for every intent, then every
    `RECOVERY_PAUSE_SECONDS` for those still `pending_unknown`, for at most
    `RECOVERY_SECONDS`; answers the last answer of each."""
    deadline = time.monotonic() + RECOVERY_SECONDS
    last: dict[str, Answer] = {}
    waiting = list(orders)
    round_number = 0
    while waiting:
        answers: list[Answer] = []
        scripts = [Script(order_id, f"{order_id}-again{round_number}", 1, 1, False, answers) for order_id in waiting]
        await asyncio.gather(*(ask(script) for script in scripts))
        for answer in answers:
            last[answer.order_id] = answer
        waiting = [order_id for order_id in waiting if last[order_id].outcome["status"] == "pending_unknown"]
        if waiting and time.monotonic() > deadline:
            break
        if waiting:
            await asyncio.sleep(RECOVERY_PAUSE_SECONDS)
        round_number += 1
    return last


def run_and_check(framework: str, storm_name: str, ask: Ask, mock: Mock) -> None:
    """The storm `storm_name` of `STORMS`, recovery without faults, and a last ask per
    intent; prints the figures and checks every answer the model was shown against the
    provider's log."""
    orders = [f"{framework}-{storm_name}-{n}" for n in range(1, INTENTS + 1)]

    async def everything() -> tuple[list[Answer], dict[str, Answer], list[Answer], float]:
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(TOOL_THREADS, thread_name_prefix="tool"))
        mock.faults(**STORMS[storm_name])
        started = time.monotonic()
        storm_answers = await storm(ask, orders)
        storm_seconds = time.monotonic() - started
        mock.faults()
        recovered = await recover(ask, orders)
        final: list[Answer] = []
        await asyncio.gather(*(ask(Script(order_id, f"{order_id}-final", 1, 1, False, final)) for order_id in orders))
        return storm_answers, recovered, final, storm_seconds

    storm_answers, recovered, final, storm_seconds = asyncio.run(everything())

    effects = mock.effects()
    per_intent = collections.Counter(answer.order_id for answer in storm_answers)
    storm_statuses = collections.Counter(answer.outcome["status"] for answer in storm_answers)
    recovery_statuses = collections.Counter(answer.outcome["status"] for answer in recovered.values())
    final_statuses = collections.Counter(answer.outcome["status"] for answer in final)
    effects_per_intent = sorted(collections.Counter(effects["by_intent_key"].values()).items())
    print(
        f"\n{framework}, storm {storm_name}: {INTENTS} intents x {CALLS_PER_INTENT} calls = {len(storm_answers)} tool calls "
        f"(user {USER_ASKS} x run {RUN_ATTEMPTS} x model turns {MODEL_TURNS} x parallel {PARALLEL_CALLS}; "
        f"HTTP client re-sends {HTTP_RETRIES}) in {storm_seconds:.1f} s; provider: {mock.stats()}\n"
        f"storm answers: {dict(storm_statuses)}\n"
        f"after the faults stopped: {dict(recovery_statuses)}; final answers: {dict(final_statuses)}\n"
        f"effects: {effects['total']} total over {len(effects['by_intent_key'])} intents "
        f"(effects per intent: count of intents {dict(effects_per_intent)}), duplicates {effects['duplicates']}"
    )

    # Every call of every layer reached the tool and the model read an answer.
    assert per_intent == {order_id: CALLS_PER_INTENT for order_id in orders}, per_intent
    # No duplicate effect, and no lost intent: exactly one effect per intent.
    assert effects["duplicates"] == []
    assert effects["by_intent_key"] == {provider_key(order_id): 1 for order_id in orders}
    assert effects["total"] == INTENTS
    refunds = {order_id: _refund(mock, order_id) for order_id in orders}
    # Every answer the model read agrees with the provider's log.
    for answer in storm_answers:
        refund = refunds[answer.order_id]
        status = answer.outcome["status"]
        assert status in STORM_STATUSES, answer
        if status in {"done", "already_done"}:
            assert answer.outcome["result"]["id"] == refund["id"], answer
        if status == "not_executed":
            assert answer.asked_ms <= refund["created_ms"], f"told not_executed after the refund existed: {answer}"
    for order_id, answer in recovered.items():
        assert answer.outcome["status"] in {"done", "already_done"}, answer
        assert answer.outcome["result"]["id"] == refunds[order_id]["id"], answer
    assert len(final) == INTENTS
    for answer in final:
        assert answer.outcome["status"] == "already_done", answer
        assert answer.outcome["result"]["id"] == refunds[answer.order_id]["id"], answer


def _refund(mock: Mock, order_id: str) -> dict[str, Any]:
    (refund,) = mock.refunds(provider_key(order_id))
    return refund

