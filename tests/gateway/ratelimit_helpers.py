"""Redis access for limiter tests: db 14 (or REDIS_URL), each test under its own key prefix."""
import asyncio
import os
import socket
import uuid

from gateway.limits.admission import Admission, LimiterConfig, Limits, RateLimiter, Subject, SubjectKind, make_client

DEFAULT_URL = "redis://127.0.0.1:6379/14"
SLOW_WINDOW = 3600  # s: exactness tests count within one window, however slowly they run


def redis_url() -> str | None:
    """REDIS_URL, else the local default when something answers there, else None (skip)."""
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"]
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=0.5).close()
    except OSError:
        return None
    return DEFAULT_URL


def tenant(**limits):
    """One tenant subject ("t1") with the given limits."""
    return [Subject(SubjectKind.TENANT, "t1", Limits(**limits))]


def admission(subjects, tenant="t1", prompt=100, max_tokens=200, cost=0):
    return Admission(str(uuid.uuid4()), tenant, subjects, prompt, max_tokens, cost)


async def admit_many(url, prefix, subjects, n, **kwargs):
    """n concurrent admissions through one client; returns how many were admitted."""
    client = make_client(url, timeout_seconds=5)  # 200 at once on 2 cores: not a latency test
    # A window of an hour: 50 per window stays exactly 50 even when a loaded machine spreads the
    # admissions over seconds (a minute's window would give one back every 1.2 s).
    limiter = RateLimiter(client, LimiterConfig(prefix=prefix, timeout_seconds=5, window_seconds=SLOW_WINDOW))
    try:
        decisions = await asyncio.gather(*(limiter.admit(admission(subjects, **kwargs)) for _ in range(n)))
    finally:
        await client.aclose()
    # Only metered admissions count: a fail-open admission (reservation None) would be a bug here.
    assert all(d.reservation is not None for d in decisions if d.allowed)
    return sum(d.allowed for d in decisions)


def admit_many_in_process(args):
    """multiprocessing entry point: (url, prefix, subjects, n) -> admitted count."""
    return asyncio.run(admit_many(*args))
