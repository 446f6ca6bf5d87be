"""The gateway's Redis, end to end: over TLS (rediss://) to a real TLS-only redis-server, and none at all.

With TLS, limits are counted and answers cached on that server, and the change bus subscribes
there. Without any Redis the gateway does not let requests through uncounted: every inference
request gets an OpenAI-shaped 503 and /healthz says why.
"""
from __future__ import annotations

import shutil

import httpx
import pytest
import redis

from controlplane.redis_keys import install_prefix
from quotas.models import QuotaPolicy
from quotas.services import update_quota_policy
from tests.factories import SYSTEM
from tests.gateway_app.conftest import MODEL, wait_for
from tests.tls_redis import TlsRedis


@pytest.fixture
def tls_redis():
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server")
    server = TlsRedis()
    yield server
    server.stop()


def ask(server, key: str, **fields) -> httpx.Response:
    return server.post("/v1/completions", key, {"model": MODEL, "prompt": "def f():", "max_tokens": 4, **fields})


def test_over_tls_limits_count_answers_are_cached_and_the_bus_subscribes(gateway, alice, shared_pool, tls_redis):
    update_quota_policy(QuotaPolicy.objects.get(tenant=alice.tenant, api_key=None, user=None),
                        requests_per_minute=3, actor=SYSTEM)
    server = gateway(redis_url=tls_redis.url())
    server.wait_until_serving(alice.key.raw, MODEL)
    first, again = ask(server, alice.key.raw, temperature=0), ask(server, alice.key.raw, temperature=0)
    assert (first.status_code, again.status_code) == (200, 200)
    assert again.headers["x-switchyard-cache"] == "hit"  # stored on the TLS server, read back from it
    assert ask(server, alice.key.raw).status_code == 200
    refused = ask(server, alice.key.raw)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"
    stored = [k.decode() for k in redis.Redis.from_url(tls_redis.url()).scan_iter()]
    prefix = install_prefix(server.app.config.redis_scope)
    assert any(k.startswith(prefix + "rl:") for k in stored) and any(k.startswith(prefix + "dedup:") for k in stored)
    assert wait_for(lambda: httpx.get(server.url + "/healthz").json()["change_bus"]["connected"], 10)


def test_without_any_redis_inference_is_refused_with_503_and_healthz_says_why(gateway, alice, shared_pool):
    server = gateway(redis_url="")
    server.wait_until_serving(alice.key.raw, MODEL)  # /v1/models needs no Redis
    refused = ask(server, alice.key.raw)
    assert refused.status_code == 503
    assert refused.json() == {"error": {
        "message": refused.json()["error"]["message"], "type": "server_error", "param": None,
        "code": "redis_not_configured"}}
    assert "SWITCHYARD_GATEWAY_REDIS_URL" in refused.json()["error"]["message"]
    health = httpx.get(server.url + "/healthz")
    assert health.status_code == 503
    assert health.json()["status"] == "unavailable" and health.json()["redis"]["configured"] is False
    assert "redis_not_configured" in health.json()["redis"]["problem"]
