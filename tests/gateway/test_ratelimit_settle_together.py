"""Several settles in one SETTLE_TOGETHER call leave Redis as the same settles one SETTLE each would.

`settle_soon` gathers the settles of one event-loop iteration into one script call; these tests
run SETTLE at a fixed Redis time once per settlement and SETTLE_TOGETHER once for all of them,
compare every key the limiter wrote, and check what the gateway sees over the pipelined client.
"""
import asyncio

import pytest
import redis

from gateway.clients.pipelined_redis import PipelinedRedis, encode_command
from gateway.limits.admission import (
    ADMIT,
    SETTLE,
    SETTLE_TOGETHER,
    LimiterConfig,
    Limits,
    RateLimiter,
    Subject,
    SubjectKind,
    _packed_together,
    month_bounds,
)
from tests.gateway.ratelimit_helpers import admission, redis_url, tenant

URL = redis_url()
pytestmark = pytest.mark.skipif(URL is None, reason="needs Redis: set REDIS_URL or run one on 127.0.0.1:6379")
NOW_US = 1_764_000_000_123_456


def at_time(script: str, now_us: int) -> str:
    fixed = script.replace("call('TIME')", f"{{{now_us // 10**6}, {now_us % 10**6}}}")
    assert fixed != script
    return fixed


def subject_sets():
    """Two requests' subject sets sharing the tenant's keys; every kind the settle touches."""
    shared = Subject(SubjectKind.TENANT, "t1", Limits(requests_per_minute=100, tokens_per_minute=5000,
                                                      concurrent_requests=10, monthly_tokens=100_000,
                                                      monthly_tokens_floor=(month_bounds(NOW_US / 1e6)[0], 500)))
    key = Subject(SubjectKind.KEY, "k1", Limits(tokens_per_minute=2000, concurrent_requests=3))
    return (shared, key), (shared,)


def admitted_and_settlements(r: redis.Redis, prefix: str):
    """Six admissions at NOW_US; their settlements (plan, request id, numbers), varied spends."""
    limiter = RateLimiter(r, LimiterConfig(prefix=prefix))
    settlements = []
    for i, spent in enumerate((0, 150, 900, 300, 20, 5000)):
        request = admission(subject_sets()[i % 2], prompt=100, max_tokens=400)
        request.request_id = f"req-{i}"
        plan = limiter._plan(request, NOW_US / 1e6)
        numbers = (request.worst_case_tokens, 0, 0, 0)
        assert r.eval(at_time(ADMIT, NOW_US + i), len(plan.keys), *plan.keys,
                      *plan.argv(request.request_id, numbers))[0]
        settlements.append((plan.settlement, request.request_id, (request.worst_case_tokens, 0, spent, 0)))
    return settlements


def state(r: redis.Redis, prefix: str) -> dict:
    """Every key under `prefix` (named without it) and its value; each must have a TTL."""
    found = {}
    for key in r.scan_iter(match=f"{prefix}:*"):
        kind = r.type(key)
        value = {b"string": r.get, b"zset": lambda k: r.zrange(k, 0, -1, withscores=True),
                 b"hash": r.hgetall}[kind](key)
        assert r.pttl(key) > 0, key
        found[key.decode().removeprefix(prefix)] = value
    return found


def test_settles_in_one_call_leave_the_state_settles_one_by_one_leave(prefix):
    r = redis.Redis.from_url(URL)
    one_by_one, together = f"{prefix}:one", f"{prefix}:all"
    for plan, request_id, numbers in admitted_and_settlements(r, one_by_one):
        r.eval(at_time(SETTLE, NOW_US + 2_000), len(plan.keys), *plan.keys, *plan.argv(request_id, numbers))
    settlements = admitted_and_settlements(r, together)
    keys = [key for plan, _, _ in settlements for key in plan.keys]
    values = [value for plan, request_id, numbers in settlements for value in plan.argv(request_id, numbers)]
    r.eval(at_time(SETTLE_TOGETHER, NOW_US + 2_000), len(keys), *keys, *values)
    assert state(r, one_by_one) == state(r, together)
    assert state(r, together)  # something was compared: the budget and the rate keys remain
    r.close()


def test_settles_sent_together_are_encoded_as_one_evalsha():
    r = redis.Redis()  # never connects: only plans are built
    limiter = RateLimiter(r, LimiterConfig(prefix="p"))
    plans = [limiter._plan(admission(subjects), NOW_US / 1e6).settlement for subjects in subject_sets()]
    settlements = [(plans[0], "a", (500, 0, 20, 0)), (plans[1], "b", (500, 0, 0, 0)), (plans[0], "c", (9, 0, 9, 0))]
    keys = [key for plan, _, _ in settlements for key in plan.keys]
    values = [value for plan, rid, numbers in settlements for value in plan.argv(rid, numbers)]
    sha = "f" * 40
    assert _packed_together(sha, settlements) == encode_command(("EVALSHA", sha, len(keys), *keys, *values))


def test_settle_soon_calls_of_one_iteration_leave_as_one_call_before_the_next_admission(prefix):
    async def scenario():
        client = PipelinedRedis.from_url(URL, timeout_seconds=5)
        limiter = RateLimiter(client, LimiterConfig(prefix=prefix, timeout_seconds=5))
        sent = []
        send = client.send_quiet_later
        client.send_quiet_later = lambda *args: (sent.append(1), send(*args))
        limiter._send_quiet_later = client.send_quiet_later
        subjects = tenant(concurrent_requests=3, tokens_per_minute=10_000)
        rounds = []
        try:
            for _ in range(4):  # three slots, all taken and handed back at once, four times in a row
                decisions = await asyncio.gather(*(limiter.admit(admission(subjects)) for _ in range(3)))
                rounds.append([d.allowed for d in decisions])
                for decision in decisions:
                    limiter.settle_soon(decision.reservation, 10)
        finally:
            await client.aclose()
        return rounds, sent
    rounds, sent = asyncio.run(scenario())
    assert rounds == [[True] * 3] * 4
    assert len(sent) == 4  # one script call per round of three settles


def test_settles_sent_together_after_a_redis_restart_are_sent_again(prefix):
    async def scenario():
        client = PipelinedRedis.from_url(URL, timeout_seconds=5)
        limiter = RateLimiter(client, LimiterConfig(prefix=prefix, timeout_seconds=5))
        subjects = tenant(concurrent_requests=2)
        try:
            held = [await limiter.admit(admission(subjects)) for _ in range(2)]
            limiter._sha[SETTLE] = limiter._sha[SETTLE_TOGETHER] = "0" * 40  # NOSCRIPT, as after a restart
            for decision in held:
                limiter.settle_soon(decision.reservation, 0)
            await asyncio.sleep(0.2)
            return [(await limiter.admit(admission(subjects))).allowed for _ in range(2)]
        finally:
            await client.aclose()
    assert asyncio.run(scenario()) == [True, True]
