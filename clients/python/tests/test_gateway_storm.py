"""The retry storm against the real gateway and mock provider: many callers, from threads
and from processes, call the decorated refund tool for the same intents while the provider
times out, answers 500s that committed anyway, drops connections and rate-limits. Then the
faults stop and every intent is called once more.

Exactly once is checked on the provider's own effect log, not on what the callers were
told: no key has two effects, every intent has exactly one, and no caller was told
`rejected` or `not_executed` for an intent whose effect already existed when it called."""

from __future__ import annotations

import collections
import concurrent.futures
import multiprocessing
import time
from decimal import Decimal
from typing import Any

import pytest

import intentgate
from processes import Gateway, Mock, refund_tool, run_calls

#: Intents in the storm, and calls per intent: 9 from threads of this process, 9 from
#: worker processes (the article's four layers, each retrying, make up to 18 calls).
INTENTS = 20
CALLS_PER_INTENT = 18
WORKER_PROCESSES = 3
THREADS = 24
AMOUNT = "5.00"
#: How long the intents get to be settled once the faults stop (lookups of one intent are
#: at most one per 5 s, so a few rounds).
RECOVERY_SECONDS = 45

#: The faults of the storms, in parts per thousand. Every ambiguous shape commits, so a
#: stored 500 is replayed as a 500 and only the lookup can settle its intent.
FAULTS = {
    "timeout": 150,
    "dropped": 100,
    "server_error": 150,
    "rate_limited": 150,
    "commit_when_ambiguous": 1000,
    "lookup_failure": 100,
    "seed": 7,
}
#: Two storms: faults from every intent's first request (a 429 then is `not_executed`, and
#: the intent is executed again later), and a provider down for every intent's first
#: request (a timeout that did not commit), so every intent goes through the lookup (not
#: found) and a same-key re-send.
STORMS = {
    "faults": FAULTS,
    "first-requests-lost": {**FAULTS, "first_timeouts_per_key": 1},
}


def provider_key(order_id: str) -> str:
    """The provider key the gateway grants for an intent of the refund tool."""
    return f"refund_order:refund:{order_id}:{AMOUNT}"


@pytest.mark.parametrize("storm", list(STORMS))
def test_the_storm_makes_one_effect_per_intent_and_tells_every_caller_the_same(mock: Mock, gateway: Gateway, storm: str) -> None:
    orders = [f"{storm}-{n}" for n in range(1, INTENTS + 1)]
    half = CALLS_PER_INTENT // 2
    # Interleaved, so calls of one intent arrive together from every caller.
    thread_calls = [(order, AMOUNT) for _ in range(half) for order in orders]
    process_calls = [(order, AMOUNT) for _ in range(CALLS_PER_INTENT - half) for order in orders]
    shares = [process_calls[n::WORKER_PROCESSES] for n in range(WORKER_PROCESSES)]

    mock.faults(**STORMS[storm])
    started = time.monotonic()
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(WORKER_PROCESSES, mp_context=context) as workers:
        futures = [workers.submit(run_calls, gateway.url, mock.url, share, THREADS // WORKER_PROCESSES) for share in shares]
        records = run_calls(gateway.url, mock.url, thread_calls, THREADS)
        for future in futures:
            records.extend(future.result())
    storm_seconds = time.monotonic() - started

    # Faults off; every intent is called until the gateway settles it.
    mock.faults()
    recovery = recover(gateway, mock, orders)
    # Then three more callers each: all are told the same result.
    with intentgate.Client(gateway.url, timeout=30) as client:
        refund_order = refund_tool(client, mock.url)
        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            final = list(pool.map(lambda order: (order, refund_order(order, Decimal(AMOUNT))), orders * 3))

    effects = mock.effects()
    storm_statuses = collections.Counter(record["status"] for record in records)
    recovery_statuses = collections.Counter(outcome["status"] for outcome in recovery.values())
    final_statuses = collections.Counter(outcome["status"] for _, outcome in final)
    print(
        f"\nstorm {storm}: {INTENTS} intents, {len(records)} calls ({len(thread_calls)} from threads, {len(process_calls)} "
        f"from {WORKER_PROCESSES} processes) in {storm_seconds:.1f} s; provider: {mock.stats()}\n"
        f"storm answers: {dict(storm_statuses)}\n"
        f"after the faults stopped: {dict(recovery_statuses)}; final answers: {dict(final_statuses)}\n"
        f"effects: {effects['total']} total, {len(effects['by_intent_key'])} keys, duplicates {effects['duplicates']}"
    )

    assert [r for r in records if r["status"] == "error"] == [], "a decorated call raised"
    # No duplicate effect, and no lost intent: exactly one effect per intent.
    assert effects["duplicates"] == []
    assert effects["by_intent_key"] == {provider_key(order): 1 for order in orders}
    assert effects["total"] == INTENTS
    refunds = {order: mock.refunds(provider_key(order))[0] for order in orders}
    # Every caller's answer is consistent with the provider's log.
    for record in records:
        refund = refunds[record["order_id"]]
        assert record["status"] in {"done", "already_done", "pending_unknown", "not_executed"}, record
        if record["status"] in {"done", "already_done"}:
            assert record["result_id"] == refund["id"], record
        if record["status"] == "not_executed":
            assert record["started_ms"] <= refund["created_ms"], f"told not_executed after the refund existed: {record}"
    for order, outcome in recovery.items():
        assert outcome["status"] in {"done", "already_done"}, (order, outcome)
        assert outcome["result"]["id"] == refunds[order]["id"]
    for order, outcome in final:
        assert outcome["status"] == "already_done", (order, outcome)
        assert outcome["result"]["id"] == refunds[order]["id"]


def recover(gateway: Gateway, mock: Mock, orders: list[str]) -> dict[str, dict[str, Any]]:
    """Calls each intent once, then again every second while it is `pending_unknown`, for at
    most `RECOVERY_SECONDS`; answers the last outcome of each."""
    deadline = time.monotonic() + RECOVERY_SECONDS
    outcomes: dict[str, dict[str, Any]] = {}
    with intentgate.Client(gateway.url, timeout=30) as client:
        refund_order = refund_tool(client, mock.url)
        waiting = list(orders)
        while waiting:
            with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
                for order, outcome in zip(waiting, pool.map(lambda order: refund_order(order, Decimal(AMOUNT)), waiting)):
                    outcomes[order] = outcome
            waiting = [order for order in waiting if outcomes[order]["status"] == "pending_unknown"]
            if waiting and time.monotonic() > deadline:
                break
            if waiting:
                time.sleep(1)
    return outcomes
