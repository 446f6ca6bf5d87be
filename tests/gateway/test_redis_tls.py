"""rediss://: every Redis client of Switchyard talks TLS to a real redis-server that speaks nothing else.

The server (tests/tls_redis.py) is started on a free loopback port with certificates made for this
module, asks clients for a certificate too, and is stopped at the end. One URL with redis-py's
parameter names configures them all: the gateway's own client, redis-py's (limits' `make_client`,
Django's cache, the change bus), and Celery's broker connection (kombu, through settings).
"""
import asyncio
import ssl

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.clients.pipelined_redis import PipelinedRedis
from gateway.limits.admission import LimiterConfig, RateLimiter, make_client
from tests.gateway.ratelimit_helpers import admission, tenant
from tests.tls_redis import TlsRedis

pytestmark = pytest.mark.skipif(__import__("shutil").which("redis-server") is None, reason="needs redis-server")


@pytest.fixture(scope="module")
def tls():
    server = TlsRedis()
    yield server
    server.stop()


def keys(url: str, pattern: str = "*") -> list[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return sorted(client.scan_iter(match=pattern))
    finally:
        client.close()


def test_the_gateways_client_admits_and_counts_over_tls(tls):
    async def scenario():
        client = PipelinedRedis.from_url(tls.url(), timeout_seconds=5)
        try:
            assert await client.ping()
            limiter = RateLimiter(client, LimiterConfig(prefix="sy:tls-test:rl", timeout_seconds=5))
            decisions = [await limiter.admit(admission(tenant(requests_per_minute=2))) for _ in range(3)]
        finally:
            await client.aclose()
        return [d.allowed for d in decisions]

    assert asyncio.run(scenario()) == [True, True, False]  # counted on the TLS server: the third is refused
    assert keys(tls.url(), "sy:tls-test:rl:*") == [b"sy:tls-test:rl:{t1}:tenant:t1:requests_per_minute"]


def test_a_server_whose_certificate_no_trusted_ca_signed_is_refused(tls):
    async def ping():
        client = PipelinedRedis.from_url(tls.url(ca="other-ca.crt"), timeout_seconds=5)
        try:
            return await client.ping()
        finally:
            await client.aclose()

    with pytest.raises(RedisConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        asyncio.run(ping())
    with pytest.raises(redis.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        redis.Redis.from_url(tls.url(ca="other-ca.crt")).ping()


def test_without_a_client_certificate_redis_refuses_the_client(tls):
    async def ping():
        client = PipelinedRedis.from_url(tls.url(client_cert=False), timeout_seconds=5)
        try:
            return await client.ping()
        finally:
            await client.aclose()

    with pytest.raises(RedisConnectionError):
        asyncio.run(ping())


def test_redis_py_clients_take_the_same_url(tls):
    url = tls.url(db=3)
    assert redis.Redis.from_url(url).ping()

    async def limited():
        client = make_client(url, timeout_seconds=5)
        try:
            limiter = RateLimiter(client, LimiterConfig(prefix="sy:tls-py:rl", timeout_seconds=5))
            return [(await limiter.admit(admission(tenant(requests_per_minute=1)))).allowed for _ in range(2)]
        finally:
            await client.aclose()

    assert asyncio.run(limited()) == [True, False]
    assert keys(url, "sy:tls-py:*")


def test_djangos_cache_and_the_change_bus_publish_over_tls(tls, settings, db):
    from django.core.cache.backends.redis import RedisCache

    from controlplane import change_bus
    from controlplane.redis_keys import bus_names, current_install_id

    url = tls.url(db=4)
    cache = RedisCache(url, {"KEY_FUNCTION": "controlplane.redis_keys.cache_key"})
    cache.set("greeting", "hello", 60)
    assert cache.get("greeting") == "hello"
    assert keys(url) == [f"sy:{current_install_id()}:cache::1:greeting".encode()]
    settings.SWITCHYARD_GATEWAY_REDIS_URL = url
    change_bus._local.client = None  # a client of this URL
    change_bus._paused_until = 0.0
    try:
        seq = change_bus.publish_change("quota.update")
    finally:
        change_bus._local.client = None
    from fleet.install import install_id

    assert seq == 1 and redis.Redis.from_url(url).get(bus_names(install_id())[0]) == b"1"


def test_celerys_broker_connection_verifies_the_server_and_carries_the_install_prefix(tls, db):
    from controlplane.celery import app
    from controlplane.redis_keys import celery_prefix
    from controlplane.redis_tls import broker_ssl_options

    url = tls.url(db=5)
    options = broker_ssl_options(url)
    assert options["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    with app.connection_for_write(url, ssl=options) as connection:
        queue = connection.SimpleQueue("tls-probe")
        queue.put({"n": 1})
        queue.close()
    assert f"{celery_prefix()}tls-probe".encode() in keys(url)
    untrusted = tls.url(db=5, ca="other-ca.crt")
    with app.connection_for_write(untrusted, ssl=broker_ssl_options(untrusted)) as connection:
        with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
            connection.SimpleQueue("tls-probe").put({"n": 2})


@pytest.mark.parametrize("url, problem", [
    ("redis://127.0.0.1:6379/0?ssl_ca_certs=/ca.pem", "unsupported Redis URL parameters"),
    ("rediss://127.0.0.1:6379/0?sentinel=mymaster", "unsupported Redis URL parameters"),
    ("rediss://127.0.0.1:6379/0?ssl_cert_reqs=sometimes", "ssl_cert_reqs must be one of"),
    ("redis+sentinel://127.0.0.1:26379/mymaster", "only redis:// and rediss://"),
])
def test_urls_the_gateway_cannot_honour_fail_at_start_with_the_reason(url, problem):
    with pytest.raises(ValueError, match=problem):
        PipelinedRedis.from_url(url)
