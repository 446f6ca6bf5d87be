"""Two installs on one Redis database, default settings: no key, counter, cached answer or message is shared.

Each install has its own database (SQLite in its own var dir), its own simulator engine and its own
`python -m gateway`; both have REDIS_URL pointing at the same Redis database (a redis-server this test
starts), so Django's cache, Celery's broker, the change bus and the gateway's limits and cache all
share it. Their tenant, key and model-version ids are the same numbers (every database starts at 1).
Traffic exercises rate limits, a monthly token budget, the de-duplication cache and the change bus;
then every key in Redis (SCAN) and every pub/sub channel must belong to exactly one install.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from functools import partial

import httpx
import pytest
import redis

from apikeys.keyformat import display_prefix
from bench._procs import REPO_ROOT, free_port, stop
from controlplane.redis_keys import BUS, CACHE, CELERY, DEDUP, LIMITS, install_prefix
from tests.gateway_app.conftest import wait_for
from tests.gateway_app.throwaway_install import MODEL, Install, call

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")]
KEY_RPM = 3
CACHED = {"model": MODEL, "prompt": "def same_question():", "max_tokens": 4, "temperature": 0}


@pytest.fixture
def shared_redis():
    """A redis-server of this test's own: whatever is in it, the two installs put there."""
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, start_new_session=True)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    assert wait_for(lambda: _pings(client), 20), "the shared redis-server did not start"
    yield client, url
    client.close()
    stop(proc)


def _pings(client) -> bool:
    try:
        return client.ping()
    except redis.ConnectionError:
        return False


@pytest.fixture
def installs(simulators, shared_redis):
    started, gateways = [], []
    try:
        for _ in range(2):
            install = Install(simulators, postgres=False, redis_url=shared_redis[1],
                              rows=("--key-rpm", str(KEY_RPM), "--monthly-tokens", "1000000"))
            started.append(install)
            install.probe = probe(install)
            proc, install.gateway = install.start_gateway(workers=1)
            gateways.append(proc)
        yield started
    finally:
        for proc in gateways:
            stop(proc, grace=20)
        for install in started:
            install.close()


def probe(install: Install) -> dict:
    done = subprocess.run([sys.executable, "-m", "tests.gateway_app.install_probe"], cwd=REPO_ROOT,
                          env=install.env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def health(install: Install) -> dict:
    return httpx.get(install.gateway + "/healthz", timeout=10).json()


def counts_its_bill(client, budget_key: str, install: Install) -> bool:
    """The budget's `used` in Redis is what the install's own usage records bill (and not nothing)."""
    return int(client.hget(budget_key, "used") or 0) == billed_tokens(install) > 0


def billed_tokens(install: Install) -> int:
    with sqlite3.connect(install.sqlite_path, timeout=10) as connection:
        return connection.execute("SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0) "
                                  "FROM usage_usageevent").fetchone()[0]


def test_two_installs_on_one_redis_database_share_no_key(installs, shared_redis):
    a, b = installs
    client = shared_redis[0]
    assert a.probe["install_id"] != b.probe["install_id"]
    for same in ("tenant", "keys", "versions"):  # the ids collide: only the install tells them apart
        assert a.probe[same] == b.probe[same], same
    assert wait_for(lambda: health(a)["change_bus"]["connected"] and health(b)["change_bus"]["connected"], 20)

    # The cache: A's answer is A's. B asks the identical question with the same tenant and version ids.
    assert call(a.gateway, a.key, CACHED).headers["x-switchyard-cache"] == "miss"
    assert call(a.gateway, a.key, CACHED).headers["x-switchyard-cache"] == "hit"
    assert call(b.gateway, b.key, CACHED).headers["x-switchyard-cache"] == "miss"

    # The rate counters: A's key (id 1 in both) has used its 3 a minute; B's (id 1 too) has used 1.
    assert call(a.gateway, a.key, CACHED | {"temperature": 1}).status_code == 200
    assert call(a.gateway, a.key, CACHED).status_code == 429
    assert [call(b.gateway, b.key, CACHED | {"temperature": 1}).status_code for _ in range(2)] == [200, 200]
    assert call(b.gateway, b.key, CACHED).status_code == 429

    # The change bus: a change in A reaches A's gateway, never B's.
    b_seq = health(b)["change_bus"]["last_seq"]
    a_seq = health(a)["change_bus"]["last_seq"]
    revoked = subprocess.run([sys.executable, "-m", "tests.gateway_app.bus_driver", "revoke",
                              display_prefix(a.cold_key)], cwd=REPO_ROOT, env=a.env(), capture_output=True,
                             text=True, timeout=120)
    assert revoked.returncode == 0, revoked.stderr[-3000:]
    assert wait_for(lambda: health(a)["change_bus"]["last_seq"] > a_seq, 10)
    assert call(a.gateway, a.cold_key, path="/v1/models").status_code == 401
    assert call(b.gateway, b.cold_key, path="/v1/models").status_code == 200
    assert health(b)["change_bus"]["last_seq"] == b_seq and health(b)["change_bus"]["gaps"] == 0

    # Every key and channel in the shared database belongs to exactly one install, and each install's
    # keys cover every part: limits, cache answers, bus, Django's cache, Celery's broker.
    prefixes = {name: install_prefix(install.probe["install_id"]) for name, install in (("a", a), ("b", b))}
    owned = {"a": set(), "b": set()}
    for key in client.scan_iter(count=1000):
        owners = [name for name, prefix in prefixes.items() if key.decode().startswith(prefix)]
        assert len(owners) == 1, f"{key!r} belongs to {owners or 'no install'}"
        owned[owners[0]].add(key.decode())
    assert owned["a"].isdisjoint(owned["b"])
    for name, keys in owned.items():
        parts = {key[len(prefixes[name]):].split(":", 1)[0] for key in keys}
        assert parts >= {LIMITS, DEDUP, BUS, CACHE, CELERY}, (name, sorted(keys))
    channels = [c.decode() for c in client.pubsub_channels()]
    assert channels and all(sum(c.startswith(p) for p in prefixes.values()) == 1 for c in channels), channels

    # Budgets are not shared either: each install's budget counts exactly what its own records bill.
    for name, install in (("a", a), ("b", b)):
        budget = [k for k in owned[name] if ":monthly_tokens:" in k and not k.endswith(":r")]
        assert len(budget) == 1, budget
        assert wait_for(partial(counts_its_bill, client, budget[0], install), 10), \
            (name, client.hgetall(budget[0]), billed_tokens(install))
