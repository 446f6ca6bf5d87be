"""Atomic limits against a real Redis: exactness under concurrency, budgets, leases, failure."""
import asyncio
import multiprocessing
import socket

import pytest

from gateway.limits.admission import (
    ADMIT,
    FailurePolicy,
    LimiterConfig,
    LimitKind,
    Limits,
    Outcome,
    RateLimiter,
    Subject,
    SubjectKind,
    make_client,
)
from tests.gateway.ratelimit_helpers import admission, admit_many, admit_many_in_process, redis_url, tenant

URL = redis_url()
pytestmark = pytest.mark.skipif(URL is None, reason="needs Redis: set REDIS_URL or run one on 127.0.0.1:6379")


def run(scenario, prefix, **config):
    async def main():
        client = make_client(URL)
        try:
            return await scenario(RateLimiter(client, LimiterConfig(prefix=prefix, **config)))
        finally:
            await client.aclose()
    return asyncio.run(main())


def test_200_concurrent_admissions_against_50_per_minute_admit_exactly_50(prefix):
    assert asyncio.run(admit_many(URL, prefix, tenant(requests_per_minute=50), 200)) == 50


def test_two_processes_share_one_limit_exactly(prefix):
    args = (URL, prefix, tenant(requests_per_minute=50), 100)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        counts = pool.map(admit_many_in_process, [args, args])
    assert sum(counts) == 50


def test_budget_race_admits_exactly_the_reservations_that_fit(prefix):
    # 32 first requests at once, each reserving 1,000 worst-case tokens, against 3,500.
    subjects = tenant(monthly_tokens=3500)
    assert asyncio.run(admit_many(URL, prefix, subjects, 32, prompt=200, max_tokens=800)) == 3


def test_a_refusal_names_the_limit_and_counts_nothing(prefix):
    async def scenario(limiter):
        subjects = tenant(requests_per_minute=100) + [
            Subject(SubjectKind.KEY, "k1", Limits(requests_per_minute=1))]
        first = await limiter.admit(admission(subjects))
        second = await limiter.admit(admission(subjects))
        return first, second
    first, second = run(scenario, prefix)
    assert first.allowed and not second.allowed
    assert (second.refused.subject, second.refused.limit_kind) == (SubjectKind.KEY, LimitKind.REQUESTS_PER_MINUTE)
    assert 0 < second.retry_after <= 60
    # The tenant's headroom was not spent by the refused request; the key is the tightest.
    assert second.headers["x-ratelimit-remaining-requests"] == "0"
    assert first.headers["x-ratelimit-limit-requests"] == "1"


def test_concurrency_slot_is_released_by_settle(prefix):
    async def scenario(limiter):
        subjects = tenant(concurrent_requests=2)
        a, b = [await limiter.admit(admission(subjects)) for _ in range(2)]
        refused = await limiter.admit(admission(subjects))
        await limiter.settle(a.reservation, actual_tokens=10)
        return a, b, refused, await limiter.admit(admission(subjects))
    a, b, refused, again = run(scenario, prefix)
    assert a.allowed and b.allowed and again.allowed
    assert refused.refused.limit_kind == LimitKind.CONCURRENT_REQUESTS


def test_a_crashed_gateways_lease_lapses(prefix):
    async def scenario(limiter):
        subjects = tenant(concurrent_requests=1)
        held = await limiter.admit(admission(subjects))  # never settled: the gateway "crashed"
        blocked = await limiter.admit(admission(subjects))
        await asyncio.sleep(0.3)
        return held, blocked, await limiter.admit(admission(subjects))
    held, blocked, after = run(scenario, prefix, lease_seconds=0.2)
    assert held.allowed and not blocked.allowed and after.allowed


def test_extend_keeps_a_long_stream_slot(prefix):
    async def scenario(limiter):
        subjects = tenant(concurrent_requests=1)
        held = await limiter.admit(admission(subjects))
        for _ in range(3):
            await asyncio.sleep(0.15)
            assert await limiter.extend(held.reservation)
        return await limiter.admit(admission(subjects))
    assert not run(scenario, prefix, lease_seconds=0.3).allowed


def test_extend_keeps_a_long_stream_budget_reservation(prefix):
    async def scenario(limiter):
        subjects = tenant(monthly_tokens=1500)  # room for one worst case of 1,000 tokens, not two
        held = await limiter.admit(admission(subjects, prompt=500, max_tokens=500))
        for _ in range(3):  # 0.45 s: past the 0.3 s reservation, which a renewal must keep alive
            await asyncio.sleep(0.15)
            assert await limiter.extend(held.reservation)
        return await limiter.admit(admission(subjects, prompt=500, max_tokens=500))
    assert not run(scenario, prefix, reservation_seconds=0.3).allowed


def test_a_budget_reservation_not_renewed_lapses(prefix):
    async def scenario(limiter):
        subjects = tenant(monthly_tokens=1500)
        await limiter.admit(admission(subjects, prompt=500, max_tokens=500))
        await asyncio.sleep(0.45)  # a gateway that died mid-stream: its reservation is given back
        return await limiter.admit(admission(subjects, prompt=500, max_tokens=500))
    assert run(scenario, prefix, reservation_seconds=0.3).allowed


def test_settle_returns_the_unused_reservation_and_charges_the_actual(prefix):
    async def scenario(limiter):
        subjects = tenant(monthly_tokens=2000, monthly_cost_micros=3000)
        first = await limiter.admit(admission(subjects, prompt=500, max_tokens=1000, cost=1500))
        blocked = await limiter.admit(admission(subjects, prompt=500, max_tokens=1000, cost=1500))
        await limiter.settle(first.reservation, actual_tokens=400, actual_cost_micros=400)
        second = await limiter.admit(admission(subjects, prompt=500, max_tokens=1000, cost=1500))
        third = await limiter.admit(admission(subjects, prompt=0, max_tokens=101, cost=1))
        return first, blocked, second, third
    first, blocked, second, third = run(scenario, prefix)
    assert first.allowed and second.allowed
    assert blocked.refused.limit_kind == LimitKind.MONTHLY_TOKENS
    assert blocked.retry_after > 60  # budgets free up at settle or at the month's turn
    # used 400 + reserved 1,500 leaves exactly 100 tokens: 101 is refused.
    assert third.refused.limit_kind == LimitKind.MONTHLY_TOKENS


def test_settle_credits_unused_tokens_back_to_the_per_minute_window(prefix):
    async def scenario(limiter):
        subjects = tenant(tokens_per_minute=1000)
        first = await limiter.admit(admission(subjects, prompt=300, max_tokens=500))
        blocked = await limiter.admit(admission(subjects, prompt=300, max_tokens=500))
        await limiter.settle(first.reservation, actual_tokens=100)
        return blocked, await limiter.admit(admission(subjects, prompt=300, max_tokens=500))
    blocked, after = run(scenario, prefix)
    assert blocked.refused.limit_kind == LimitKind.TOKENS_PER_MINUTE and after.allowed
    assert after.headers["x-ratelimit-remaining-tokens"] == "100"


def test_a_lost_settle_lapses_and_gives_the_budget_back(prefix):
    async def scenario(limiter):
        subjects = tenant(monthly_cost_micros=1000)
        held = await limiter.admit(admission(subjects, cost=1000))
        blocked = await limiter.admit(admission(subjects, cost=1000))
        await asyncio.sleep(0.3)
        return held, blocked, await limiter.admit(admission(subjects, cost=1000))
    held, blocked, after = run(scenario, prefix, reservation_seconds=0.2)
    assert held.allowed and not blocked.allowed and after.allowed


def test_a_flushed_script_is_loaded_again(prefix):
    async def scenario(limiter):
        limiter._sha[ADMIT] = "0" * 40  # what Redis answers after a restart: NOSCRIPT
        return await limiter.admit(admission(tenant(requests_per_minute=5)))
    assert run(scenario, prefix).allowed


def dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again: nothing listens there


@pytest.mark.parametrize("limits, config, outcome", [
    ({"monthly_tokens": 10**6}, {}, Outcome.LIMITER_UNAVAILABLE),
    ({"requests_per_minute": 10}, {}, Outcome.ADMITTED),
    ({"requests_per_minute": 10}, {"rate_failure": FailurePolicy.FAIL_CLOSED}, Outcome.LIMITER_UNAVAILABLE),
    ({"monthly_tokens": 10**6}, {"budget_failure": FailurePolicy.FAIL_OPEN}, Outcome.ADMITTED),
])
def test_unreachable_redis_answers_per_policy(limits, config, outcome):
    async def scenario():
        client = make_client(f"redis://127.0.0.1:{dead_port()}/0")
        limiter = RateLimiter(client, LimiterConfig(prefix="sy:test:dead", **config))
        # The guard only stops a hang; the 250 ms budget is measured, not asserted.
        decision = await asyncio.wait_for(limiter.admit(admission(tenant(**limits))), 5)
        settled = await asyncio.wait_for(limiter.settle(decision.reservation, 1), 5) \
            if decision.reservation else None
        await client.aclose()
        return decision, settled
    decision, settled = asyncio.run(scenario())
    assert decision.outcome == outcome
    assert decision.reservation is None and settled is None


def test_unanswering_redis_times_out_per_policy():
    async def scenario():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
        port = server.sockets[0].getsockname()[1]
        client = make_client(f"redis://127.0.0.1:{port}/0", timeout_seconds=0.1)
        limiter = RateLimiter(client, LimiterConfig(prefix="sy:test:mute", timeout_seconds=0.1))
        decision = await asyncio.wait_for(limiter.admit(admission(tenant(monthly_tokens=10))), 5)
        server.close()
        return decision
    assert asyncio.run(scenario()).outcome == Outcome.LIMITER_UNAVAILABLE


def test_budget_keys_expire_also_when_the_emptied_reservation_set_is_made_again(prefix):
    # Budget TTLs are set when a key is created, not on every request: the reservation zset
    # vanishes when its last reservation settles, and the next admission must give it a TTL again.
    async def scenario(limiter):
        ttls = []
        for _ in range(2):
            decision = await limiter.admit(admission(tenant(monthly_tokens=10_000, requests_per_minute=100)))
            ttls += [await limiter._client.ttl(key) for key in decision.reservation.checks[1].keys]
            await limiter.settle(decision.reservation, actual_tokens=10)
        used = await limiter._client.hget(decision.reservation.checks[1].keys[0], "used")
        return ttls, used
    ttls, used = run(scenario, prefix)
    assert all(ttl > 7 * 86400 for ttl in ttls), ttls
    assert used == b"20"
