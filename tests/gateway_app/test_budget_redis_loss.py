"""Monthly token budgets survive losing Redis: an exhausted tenant, key or user is still refused after
a Redis restart, because every budget counts at least what the usage records say was spent
(gateway/limits/budget_floors.py). The Redis here is this test's own server, restarted empty."""
from __future__ import annotations

import subprocess
import time

import pytest
import redis

from quotas.models import QuotaPolicy
from quotas.services import create_quota_policy, update_quota_policy
from tests.factories import SYSTEM, make_member, make_user
from tests.gateway_app.conftest import MODEL, inference_key, wait_for
from tests.gateway_app.helpers import usage_rows
from tests.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)
BUDGET = 400
BODY = {"model": MODEL, "prompt": "def add(a, b):", "max_tokens": 40}


class PrivateRedis:
    """A redis-server of this test alone on a free loopback port, without persistence: a restart loses all."""

    def __init__(self, directory):
        self.port, self.directory = free_port(), directory
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(self.directory)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.2)
        assert wait_for(lambda: self._pings(client), timeout=10), "redis-server did not start"
        client.close()

    @staticmethod
    def _pings(client) -> bool:
        try:
            return client.ping()
        except redis.RedisError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def private_redis(tmp_path):
    server = PrivateRedis(tmp_path)
    yield server
    server.stop()


def budgeted_key(level: str, tenant):
    """A key whose tenant, own policy or user carries the budget."""
    if level == "tenant":
        key = inference_key(tenant)
        update_quota_policy(QuotaPolicy.objects.get(tenant=tenant, api_key=None, user=None), actor=SYSTEM,
                            monthly_token_budget=BUDGET)
    elif level == "api_key":
        key = inference_key(tenant)
        create_quota_policy(tenant=tenant, api_key=key.api_key, actor=SYSTEM, monthly_token_budget=BUDGET)
    else:
        user = make_member(tenant, "developer", make_user("budgeted"))
        key = inference_key(tenant, user=user)
        create_quota_policy(tenant=tenant, user=user, actor=SYSTEM, monthly_token_budget=BUDGET)
    return key


def post(server, key) -> int:
    """The answer's status, retried while the limits are unavailable (Redis coming back)."""
    deadline = time.monotonic() + 10
    while True:
        response = server.post("/v1/completions", key.raw, BODY)
        if response.status_code != 503 or time.monotonic() > deadline:
            return response.status_code
        time.sleep(0.05)


def billed(tenant) -> int:
    return sum(row.prompt_tokens + row.completion_tokens for row in usage_rows(tenant=tenant))


@pytest.mark.parametrize("level", ["api_key", "user", "tenant"])
def test_an_exhausted_budget_stays_exhausted_after_redis_loses_it(gateway, tenant_a, shared_pool, private_redis,
                                                                  monkeypatch, level):
    monkeypatch.setattr("gateway.limits.budget_floors.REFRESH_SECONDS", 0.1)
    key = budgeted_key(level, tenant_a)
    server = gateway(redis_url=private_redis.url)
    server.wait_until_serving(key.raw, MODEL)
    statuses = []
    while 429 not in statuses:
        statuses.append(post(server, key))
        assert len(statuses) < 50
    assert statuses.count(200) >= 2
    spent = wait_for(lambda: (r := usage_rows(tenant=tenant_a)) and len(r) == len(statuses) and billed(tenant_a),
                     timeout=5)
    assert spent and spent <= BUDGET
    floors = server.app.state.limiter
    assert wait_for(lambda: sum(floors.floors.tokens.values()) == spent, timeout=5)  # the records caught up

    private_redis.restart()  # every count, reservation and script is gone
    assert [post(server, key) for _ in range(3)] == [429, 429, 429]
    time.sleep(0.3)
    assert billed(tenant_a) == spent


def test_a_budget_hash_lost_mid_month_starts_from_the_records(gateway, tenant_a, shared_pool, private_redis,
                                                              monkeypatch):
    monkeypatch.setattr("gateway.limits.budget_floors.REFRESH_SECONDS", 0.1)
    key = budgeted_key("api_key", tenant_a)
    server = gateway(redis_url=private_redis.url)
    server.wait_until_serving(key.raw, MODEL)
    assert post(server, key) == 200
    first = wait_for(lambda: billed(tenant_a), timeout=5)
    assert wait_for(lambda: sum(server.app.state.limiter.floors.tokens.values()) == first, timeout=5)
    private_redis.restart()
    assert post(server, key) == 200
    client = redis.Redis.from_url(private_redis.url)
    (budget,) = [k for k in client.scan_iter("*monthly_tokens:*") if not k.endswith(b":r")]
    second = wait_for(lambda: (total := billed(tenant_a)) > first and total, timeout=5)
    # The new hash counts the month from the records on: the first request, then the second's spend.
    assert wait_for(lambda: int(client.hget(budget, "used") or 0) == second, timeout=5)
    client.close()
