"""A database outage loses no usage and answers no 500: `python -m gateway --workers 2` on a PostgreSQL
of the test's own, which the test stops (a fast shutdown, sessions cut) and starts again.

While it is away: cached keys are served from the snapshot; a key no worker has cached, the feedback
endpoint and a gateway (re)started during the outage answer OpenAI-shaped 503s with Retry-After; every
usage event goes to the spool. Once it is back, each authenticated request has exactly one usage row,
whichever worker or gateway run answered it, and the spool is empty.
"""
from __future__ import annotations

import shutil
import sqlite3

import pytest

from bench._procs import stop
from tests.gateway_app import own_postgres
from tests.gateway_app.conftest import wait_for
from tests.gateway_app.throwaway_install import MODEL, Install, assert_unavailable, call

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")]
BODY = {"model": MODEL, "prompt": "def add(a, b):", "max_tokens": 3}


@pytest.fixture
def installs(simulators):
    """Factory: throwaway installs, removed after the test."""
    made = []

    def make(**options) -> Install:
        made.append(Install(simulators, **options))
        return made[-1]

    yield make
    for install in made:
        install.close()


@pytest.mark.skipif(own_postgres.problem() is not None, reason=str(own_postgres.problem()))
def test_a_postgresql_outage_loses_no_usage_and_answers_503_where_the_database_is_needed(installs):
    install, body = installs(postgres=True), BODY
    gateway, url = install.start_gateway()
    try:
        served = [call(url, install.key, body) for _ in range(30)]  # both workers cache the key
        assert {r.status_code for r in served} == {200}
        metered = [r.headers["x-request-id"] for r in served]

        install.postgres.stop()
        during = [call(url, install.key, body) for _ in range(20)]
        during.append(call(url, install.key, {**body, "model": "x\u0000y"}))  # a metered 404, too
        cold = call(url, install.cold_key, body)
        feedback = call(url, install.key, {"request_id": metered[0], "accepted": True}, "/v1/feedback")
        assert sum(r.status_code == 200 for r in during) >= 1  # cached keys are still served
        for response in during:
            if response.status_code not in (200, 404):  # a worker that had not cached the key
                assert_unavailable(response)
        metered += [r.headers["x-request-id"] for r in during if r.status_code in (200, 404)]
        assert_unavailable(cold)  # the finding: a key not yet cached got a 500
        assert_unavailable(feedback)
        for response in (call(url, install.key, path="/v1/models"), call(url, install.cold_key, path="/v1/models")):
            assert response.status_code in (200, 503)
            if response.status_code == 503:
                assert_unavailable(response)
    finally:
        stop(gateway, grace=30)  # each worker's last flush spools what it still held
    assert install.spool_segments()

    restarted, url = install.start_gateway()  # during the outage: it starts, and says why it cannot serve
    try:
        assert_unavailable(call(url, install.key, body))
        assert call(url, install.key, path="/healthz").json()["snapshot_loaded"] is False
        install.postgres.start()
        assert wait_for(lambda: install.stored() == sorted(metered), timeout=30), (len(install.stored()), len(metered))
        assert wait_for(lambda: not install.spool_segments(), timeout=10)
        after = wait_for(lambda: (r := call(url, install.cold_key, body)).status_code == 200 and r, timeout=10)
        assert after, "the cold key is served once the database is back"
        assert wait_for(lambda: after.headers["x-request-id"] in install.stored(), timeout=10)
        assert len(install.stored()) == len(metered) + 1  # exactly once: nothing replayed twice
    finally:
        stop(restarted, grace=30)


def test_an_embedded_sqlite_database_locked_by_another_writer_loses_no_usage(installs):
    """The embedded install (SQLite, no PostgreSQL): another process holds the write lock longer than
    `SWITCHYARD_SQLITE_TIMEOUT` (a migration, a VACUUM). Reads go on (WAL), so every key is served;
    usage writes fail, are spooled, and are written once when the lock is released."""
    install = installs(postgres=False, SWITCHYARD_SQLITE_TIMEOUT="0.3")
    gateway, url = install.start_gateway()
    try:
        metered = [call(url, install.key, BODY).headers["x-request-id"] for _ in range(10)]
        lock = sqlite3.connect(install.sqlite_path, isolation_level=None, timeout=5)
        lock.execute("BEGIN EXCLUSIVE")
        try:
            during = [call(url, key, BODY) for key in [install.key] * 15 + [install.cold_key]]
            assert {r.status_code for r in during} == {200}  # readers are not blocked, cold keys neither
            metered += [r.headers["x-request-id"] for r in during]
            assert_unavailable(call(url, install.key, {"request_id": metered[0], "accepted": True}, "/v1/feedback"))
            assert wait_for(install.spool_segments, timeout=10), "the locked writes were spooled"
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        assert wait_for(lambda: install.stored() == sorted(metered), timeout=20), (len(install.stored()), len(metered))
        assert wait_for(lambda: not install.spool_segments(), timeout=10)
    finally:
        stop(gateway, grace=30)
    assert install.stored() == sorted(metered)  # and the shutdown wrote nothing twice
