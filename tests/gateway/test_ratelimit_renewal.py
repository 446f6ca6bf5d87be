"""Requests that run long keep what they hold: the gateway renews their concurrency leases and budget
reservations (`gateway.limits.limiter.Limiter.renew_long_requests`), so a stream longer than the lease or
reservation neither frees its slot nor hands back its reservation for others to spend."""
import asyncio
from types import MappingProxyType

import pytest
import redis

from gateway.clients.pipelined_redis import PipelinedRedis
from gateway.config.snapshot import KeyInfo, Limits, Snapshot
from gateway.limits.limiter import Limiter
from gateway.metering.metrics import GatewayMetrics
from tests.gateway.ratelimit_helpers import redis_url

URL = redis_url()
pytestmark = pytest.mark.skipif(URL is None, reason="needs Redis: set REDIS_URL or run one on 127.0.0.1:6379")
KEY = KeyInfo(id=5, prefix="sy_k5", tenant_id=1, user_id=None, scopes=frozenset(), expires_at=None, revoked=False)
SNAPSHOT = Snapshot(key_policies=MappingProxyType({5: Limits(level="api_key", subject_id=5, max_concurrent_requests=2,
                                                            monthly_token_budget=10_000)}))


def expiries(prefix: str) -> dict[str, float]:
    """Every lease's and reservation's expiry (zset scores) under `prefix`."""
    r = redis.Redis.from_url(URL)
    try:
        return {f"{k.decode()} {member.decode()}": score
                for k in r.scan_iter(f"{prefix}:*") if r.type(k) == b"zset"
                for member, score in r.zrange(k, 0, -1, withscores=True)}
    finally:
        r.close()


def test_long_running_requests_have_their_leases_and_reservations_renewed(prefix):
    async def scenario():
        client = PipelinedRedis.from_url(URL)
        limiter = Limiter(client, GatewayMetrics(), prefix=prefix)
        try:
            running = await limiter.admit(key=KEY, snapshot=SNAPSHOT, request_id="long", prompt_tokens=10,
                                          max_tokens=100)
            done = await limiter.admit(key=KEY, snapshot=SNAPSHOT, request_id="short", prompt_tokens=10,
                                       max_tokens=100)
            await limiter.settle(done, used_tokens=50)
            before = expiries(prefix)
            assert await limiter.renew_long_requests(after=3600) == 0  # nothing has run that long
            await asyncio.sleep(0.01)
            assert await limiter.renew_long_requests(after=0) == 1  # only the one still running
            after = expiries(prefix)
            await limiter.settle(running, used_tokens=20)
            assert await limiter.renew_long_requests(after=0) == 0  # settled: nothing left to renew
            return before, after
        finally:
            await client.aclose()

    before, after = asyncio.run(scenario())
    assert set(before) == set(after) and len(before) == 2  # the running request's lease and reservation
    assert all(after[name] > before[name] for name in before)
