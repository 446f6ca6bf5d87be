"""A budget counts at least what the usage records say its subject spent this month (its floor), so
a Redis that lost the budget (restart, failover, eviction) or a settle still refuses an exhausted
subject; a missing budget hash starts from the floor, at admission and at settlement alike."""
import asyncio
import time

import pytest
import redis

from gateway.limits.admission import LimiterConfig, Limits, RateLimiter, Subject, SubjectKind, make_client, month_bounds
from tests.gateway.ratelimit_helpers import admission, redis_url

URL = redis_url()
pytestmark = pytest.mark.skipif(URL is None, reason="needs Redis: set REDIS_URL or run one on 127.0.0.1:6379")
MONTH = month_bounds(time.time())[0]


def key_budget(limit: int, floor: int | None, month: str = MONTH):
    return (Subject(SubjectKind.KEY, "k1", Limits(monthly_tokens=limit,
                                                  monthly_tokens_floor=None if floor is None else (month, floor))),)


def run(prefix: str, steps):
    """Run `steps(limiter)` against Redis; then the budget hash's fields."""
    async def main():
        client = make_client(URL)
        try:
            result = await steps(RateLimiter(client, LimiterConfig(prefix=prefix)))
        finally:
            await client.aclose()
        return result
    return asyncio.run(main())


def budget_hash(prefix: str) -> dict:
    r = redis.Redis.from_url(URL)
    try:
        (key,) = [k for k in r.scan_iter(f"{prefix}:*:monthly_tokens:{MONTH}")]
        return {k.decode(): int(v) for k, v in r.hgetall(key).items() if not k.startswith(b"r:")} | {"ttl": r.ttl(key)}
    finally:
        r.close()


def test_a_missing_budget_starts_from_the_floor(prefix):
    async def steps(limiter):
        refused = await limiter.admit(admission(key_budget(1000, 900), prompt=100, max_tokens=100))
        admitted = await limiter.admit(admission(key_budget(1000, 900), prompt=50, max_tokens=50))
        await limiter.settle(admitted.reservation, 80)
        return refused.allowed, admitted.allowed
    assert run(prefix, steps) == (False, True)
    state = budget_hash(prefix)
    assert state["used"] == 980 and state["reserved"] == 0 and state["ttl"] > 0


def test_a_budget_counts_at_least_its_floor(prefix):
    async def steps(limiter):
        first = await limiter.admit(admission(key_budget(1000, None), prompt=50, max_tokens=50))
        await limiter.settle(first.reservation, 100)  # Redis: 100 used
        # The records say 950 (a settle Redis lost, spend from before the budget's hash was made).
        refused = await limiter.admit(admission(key_budget(1000, 950), prompt=50, max_tokens=10))
        fits = await limiter.admit(admission(key_budget(1000, 950), prompt=20, max_tokens=30))
        return refused.allowed, fits.allowed
    assert run(prefix, steps) == (False, True)
    assert budget_hash(prefix)["used"] == 100  # the floor is a lower bound, never added on top


def test_last_months_floor_does_not_count(prefix):
    async def steps(limiter):
        budget = key_budget(1000, 1000, month="1999-01")
        return (await limiter.admit(admission(budget, prompt=50, max_tokens=50))).allowed
    assert run(prefix, steps) is True


def test_a_settle_that_finds_the_budget_gone_starts_from_the_floor(prefix):
    async def steps(limiter):
        admitted = await limiter.admit(admission(key_budget(5000, 700), prompt=50, max_tokens=50))
        r = redis.Redis.from_url(URL)
        for key in r.scan_iter(f"{prefix}:*"):
            r.delete(key)  # Redis lost everything while the request ran
        r.close()
        await limiter.settle(admitted.reservation, 90)
    run(prefix, steps)
    state = budget_hash(prefix)
    assert state["used"] == 790 and state["ttl"] > 0
