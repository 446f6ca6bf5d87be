"""The admit script's compact answer, lapsed leases cleaned only when they matter, rate key TTLs.

The script picks the most constrained requests and tokens limits itself; these tests run it at a
fixed Redis time against random limit sets and random prior state and compare its verdict and
headers with the computation the gateway did in Python before (`expected`, below).
"""
import asyncio
import math
import random
import time

import pytest
import redis

from gateway.limits.admission import (
    ADMIT,
    Admission,
    LimiterConfig,
    LimitKind,
    Limits,
    RateLimiter,
    Subject,
    SubjectKind,
    _headers,
    make_client,
)
from tests.gateway.ratelimit_helpers import admission, redis_url, tenant

URL = redis_url()
pytestmark = pytest.mark.skipif(URL is None, reason="needs Redis: set REDIS_URL or run one on 127.0.0.1:6379")
WINDOW_US = 60_000_000
RATES = (LimitKind.REQUESTS_PER_MINUTE, LimitKind.TOKENS_PER_MINUTE)


def at_fixed_time(now_us: int) -> str:
    """ADMIT with Redis's clock replaced by `now_us`."""
    script = ADMIT.replace("local t = call('TIME')", f"local t = {{{now_us // 10**6}, {now_us % 10**6}}}")
    assert script != ADMIT
    return script


def random_subjects(rng: random.Random) -> tuple:
    def limit():
        return rng.choice([None, 1, 2, 3, 7, 50, 120, 999, 10_000, 10**6, 10**9])
    return tuple(Subject(kind, f"{kind}-1", Limits(requests_per_minute=limit(), tokens_per_minute=limit(),
                                                   concurrent_requests=rng.choice([None, 1, 2, 5])))
                 for kind in SubjectKind if rng.random() < 0.8)


def expected(plan, tats: dict, held: dict, now: int, tokens: int):
    """The verdict and x-ratelimit-* headers as the gateway computed them before the compact answer."""
    values, alt, refused, retry = {}, {}, 0, 0
    for i, check in enumerate(plan.checks, 1):
        wait = None
        if check.limit_kind in RATES:
            param = -(-WINDOW_US // check.limit)
            tat = max(tats.get(check.keys[0], now), now)
            units = min(tokens if check.limit_kind == LimitKind.TOKENS_PER_MINUTE else 1, check.limit)
            tat_new, tol = tat + units * param, param * check.limit
            values[i] = (math.floor((tol - (tat_new - now)) / param), tat_new - now)
            alt[i] = (math.floor((tol - (tat - now)) / param), tat - now)
            wait = tat_new - now - tol if tat_new - now > tol else None
        elif held.get(check.keys[0], 0) >= check.limit:
            wait = 1_000_000
        if wait and (refused == 0 or wait > retry):
            refused, retry = i, wait
    shown = alt if refused else values
    headers = {}
    for kind, suffix in ((LimitKind.REQUESTS_PER_MINUTE, "requests"), (LimitKind.TOKENS_PER_MINUTE, "tokens")):
        found = [(i, c.limit) for i, c in enumerate(plan.checks, 1) if c.limit_kind == kind]
        if found:
            i, limit = min(found, key=lambda f: (shown[f[0]][0] / f[1], shown[f[0]][0]))
            left, reset = shown[i]
            headers[f"x-ratelimit-limit-{suffix}"] = str(limit)
            headers[f"x-ratelimit-remaining-{suffix}"] = str(left) if left > 0 else "0"
            headers[f"x-ratelimit-reset-{suffix}"] = f"{math.ceil(reset / 1000) / 1000:g}s"
    return (0 if refused else 1), refused, retry, headers


def test_the_compact_answer_gives_the_same_verdict_and_headers_as_before(prefix):
    rng = random.Random(20261130)
    client = redis.Redis.from_url(URL)
    limiter = RateLimiter(None, LimiterConfig(prefix=prefix))
    now = int(time.time() * 10**6)
    compared = 0
    for case in range(300):
        subjects = random_subjects(rng)
        tenant_id = f"t{case}"
        plan = limiter._plan(Admission("probe", tenant_id, subjects, 0, 0), now / 10**6)
        if not plan.checks or plan.impossible:
            continue
        tats, held = {}, {}
        for check in plan.checks:
            key = check.keys[0]
            if check.limit_kind in RATES and rng.random() < 0.7:  # some window already used, or long idle
                tats[key] = now + rng.randint(-5 * 10**6, WINDOW_US + 10**6)
                client.set(key, tats[key], px=120_000)
            elif check.limit_kind == LimitKind.CONCURRENT_REQUESTS and rng.random() < 0.5:
                held[key] = rng.randint(0, check.limit)
                if held[key]:
                    client.zadd(key, {f"lease-{n}": now + 10**9 for n in range(held[key])})
        tokens = rng.choice([1, 10, 376, 5000, 10**6])
        result = client.evalsha(client.script_load(at_fixed_time(now)), len(plan.keys), *plan.keys,
                                *plan.argv(f"req-{case}", (tokens, 0, 0, 0)))
        allowed, refused, retry, headers = expected(plan, tats, held, now, tokens)
        got = {name.decode(): value.decode() for name, value in _headers(plan, result)}
        assert (result[0], result[1], result[2], got) == (allowed, refused, retry, headers), (case, subjects)
        client.delete(*plan.keys)
        compared += 1
    client.close()
    assert compared > 200


def run(scenario, prefix, **config):
    async def main():
        client = make_client(URL)
        try:
            return await scenario(RateLimiter(client, LimiterConfig(prefix=prefix, **config)), client)
        finally:
            await client.aclose()
    return asyncio.run(main())


def test_lapsed_leases_are_dropped_when_the_count_reaches_the_limit(prefix):
    async def scenario(limiter, client):
        subjects = tenant(concurrent_requests=3)
        crashed = [await limiter.admit(admission(subjects)) for _ in range(2)]  # never settled
        await asyncio.sleep(0.3)  # both leases lapse
        below = await limiter.admit(admission(subjects))  # 2 of 3 held (lapsed): admitted, nothing dropped
        key = below.reservation.checks[0].keys[0]
        size_below = await client.zcard(key)
        at_limit = await limiter.admit(admission(subjects))  # 3 of 3: the lapsed two are dropped first
        return crashed, below, size_below, at_limit, await client.zcard(key)
    crashed, below, size_below, at_limit, size_after = run(scenario, prefix, lease_seconds=0.2)
    assert all(d.allowed for d in crashed) and below.allowed and at_limit.allowed
    assert size_below == 3 and size_after == 2


def test_live_leases_still_refuse_at_the_limit(prefix):
    async def scenario(limiter, client):
        subjects = tenant(concurrent_requests=2)
        held = [await limiter.admit(admission(subjects)) for _ in range(2)]
        return held, await limiter.admit(admission(subjects))
    held, refused = run(scenario, prefix)
    assert all(d.allowed for d in held)
    assert refused.refused.limit_kind == LimitKind.CONCURRENT_REQUESTS and refused.retry_after == 1.0


# Read atomically: Redis's time, a rate key's time (µs) and its TTL (ms).
READ_KEY = "local t = redis.call('TIME') return {t[1] * 1000000 + t[2], redis.call('GET', KEYS[1]), " \
           "redis.call('PTTL', KEYS[1])}"
# What the older scripts did on every write: expire a second past the key's time.
OLD_EXPIRY = "local t = redis.call('TIME') local ahead = redis.call('GET', KEYS[1]) - (t[1] * 1000000 + t[2]) " \
             "return redis.call('PEXPIRE', KEYS[1], math.ceil(ahead / 1000) + 1000)"


def test_rate_keys_outlive_their_time_also_when_the_ttl_is_kept(prefix):
    # Writes within the same second of the stored time keep the key's TTL; the key must still
    # live until its time has passed, also after a key written by the older scripts (TTL one
    # second past its time, not past the end of its second).
    async def scenario(limiter, client):
        subjects = tenant(requests_per_minute=600, tokens_per_minute=60_000)
        seen = []
        for n in range(40):
            decision = await limiter.admit(admission(subjects, prompt=10, max_tokens=40 + n))
            await limiter.settle(decision.reservation, actual_tokens=20)
            for check in decision.reservation.checks:
                now_us, tat_us, ttl_ms = await client.eval(READ_KEY, 1, check.keys[0])
                seen.append((ttl_ms, (int(tat_us) - now_us) / 1000))
            if n in (5, 25):  # an older gateway writes next
                for check in decision.reservation.checks:
                    await client.eval(OLD_EXPIRY, 1, check.keys[0])
        return seen
    seen = run(scenario, prefix)
    assert all(ttl >= ahead - 1 for ttl, ahead in seen), seen  # 1 ms: PTTL counts whole ms
    assert all(ttl <= ahead + 2100 for ttl, ahead in seen), seen  # and not kept much longer either


def test_decision_headers_are_bytes_as_sent_and_readable_as_text(prefix):
    async def scenario(limiter, client):
        return await limiter.admit(admission(tenant(requests_per_minute=50, tokens_per_minute=1000),
                                             prompt=100, max_tokens=200))
    decision = run(scenario, prefix)
    assert [name for name, _ in decision.header_list] == [
        b"x-ratelimit-limit-requests", b"x-ratelimit-remaining-requests", b"x-ratelimit-reset-requests",
        b"x-ratelimit-limit-tokens", b"x-ratelimit-remaining-tokens", b"x-ratelimit-reset-tokens"]
    assert decision.headers["x-ratelimit-remaining-requests"] == "49"
    assert decision.headers["x-ratelimit-remaining-tokens"] == "700"
    assert decision.headers["x-ratelimit-reset-requests"] == "1.2s"
