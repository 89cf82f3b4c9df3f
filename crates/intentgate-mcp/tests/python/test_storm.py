"""The retry storm through MCP: each refund intent asked 18 times (the model, the framework,
the HTTP client and the user, some at once), against a provider that produces the faults
of docs/design.md section 5, over both transports. One effect per intent at the provider."""

import collections

import anyio
import pytest

from support import ERAS, outcome_of, refund

INTENTS = 10
CALLS_PER_INTENT = 18
# Statuses a refund may get while its intent is being settled by another call or retried.
STORM_STATUSES = {"done", "already_done", "pending_unknown", "not_executed"}
# Follow-up calls of "the user" after the storm ("did my refund go through?").
FOLLOW_UPS_MAX = 10
FOLLOW_UP_PAUSE_SECONDS = 0.3
# Longest a storm may take before the test fails instead of hanging.
STORM_SECONDS_MAX = 120


async def storm(client, orders: list[str]) -> collections.Counter:
    """Every order asked CALLS_PER_INTENT times, concurrently, some layers a little later."""
    statuses = collections.Counter()

    async def one(order: str, call: int) -> None:
        await anyio.sleep((call % 6) * 0.04)
        outcome = outcome_of(await client.call_tool("refund_order", refund(order)))
        statuses[outcome["status"]] += 1

    with anyio.fail_after(STORM_SECONDS_MAX):
        async with anyio.create_task_group() as group:
            for order in orders:
                for call in range(CALLS_PER_INTENT):
                    group.start_soon(one, order, call)
    assert sum(statuses.values()) == len(orders) * CALLS_PER_INTENT
    return statuses


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_eighteen_calls_per_refund_intent_under_faults_make_exactly_one_refund(gateway, era):
    # Every shape the provider can recover from: rate limits and unavailability (retried
    # with the same key), timeouts, dropped connections and 5xx that committed (found by the
    # lookup). None of them may turn into a second refund, and none may lose the first.
    gateway.mock.faults(
        rate_limited=120,
        unavailable=120,
        timeout=150,
        dropped=150,
        server_error=150,
        commit_when_ambiguous=1000,
        lookup_failure=0,
        latency_p50_ms=5,
        latency_p95_ms=80,
        seed=7,
    )
    orders = [f"storm-{era}-{n}" for n in range(INTENTS)]
    async with gateway.connect(era) as client:
        statuses = await storm(client, orders)
        assert set(statuses) <= STORM_STATUSES, statuses
        # The user asks again until the answer is final; `not_executed` says that is safe.
        for order in orders:
            for _ in range(FOLLOW_UPS_MAX):
                outcome = outcome_of(await client.call_tool("refund_order", refund(order)))
                if outcome["status"] in ("done", "already_done"):
                    break
                await anyio.sleep(FOLLOW_UP_PAUSE_SECONDS)
            assert outcome["status"] in ("done", "already_done"), (order, outcome)
    effects = gateway.mock.effects()
    assert effects["duplicates"] == [], effects
    made = {order: effects["by_order"].get(order, 0) for order in orders}
    assert made == {order: 1 for order in orders}, made
    # The faults were met: the provider was asked more than once per intent (retries of
    # refused requests, lookups after ambiguous ones), though each refund happened once.
    stats = gateway.mock.stats()
    assert stats["requests"] + stats["lookups"] > INTENTS, stats
    print(
        f"{gateway.transport} {era}: {INTENTS} intents x {CALLS_PER_INTENT} calls, statuses {dict(statuses)}, "
        f"refunds per intent {sorted(set(made.values()))}, provider requests {stats['requests']}, lookups {stats['lookups']}"
    )


@pytest.mark.anyio
async def test_every_fault_shape_never_makes_a_second_refund(gateway):
    # Every row of the outcome table, lookups that fail, and ambiguous shapes that committed
    # half the time: an intent may end rejected or unknown, never refunded twice, and every
    # call is answered with an outcome, never a protocol error.
    gateway.mock.faults(
        reject=30,
        rate_limited=50,
        unavailable=30,
        timeout=60,
        dropped=40,
        server_error=60,
        commit_when_ambiguous=500,
        lookup_failure=150,
        latency_p50_ms=5,
        latency_p95_ms=80,
        seed=11,
    )
    orders = [f"shapes-{n}" for n in range(INTENTS)]
    async with gateway.connect() as client:
        statuses = await storm(client, orders)
    assert set(statuses) <= STORM_STATUSES | {"rejected"}, statuses
    effects = gateway.mock.effects()
    assert effects["duplicates"] == [], effects
    for order in orders:
        assert effects["by_order"].get(order, 0) <= 1, (order, effects)
    print(f"{gateway.transport} every shape: statuses {dict(statuses)}, refunds {effects['total']} for {INTENTS} intents")
