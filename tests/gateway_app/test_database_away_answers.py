"""Every database touch on the gateway's request path answers 503 `service_unavailable` while the
database is away, and only then: a refused value is still the error it is.

"Away" is a real connection attempt to a loopback port nothing listens on (psycopg's own error);
tests/gateway_app/test_usage_database_outage.py stops a real PostgreSQL under running gateways.
"""
import asyncio
import sqlite3
from types import SimpleNamespace

import psycopg
import pytest
from django.db import DataError, IntegrityError, OperationalError

from bench._procs import free_port
from gateway import errors
from gateway.clients.database import DatabaseThreads, database_unavailable
from gateway.config.refresher import SnapshotRefresher
from gateway.config.snapshot import KeyInfo, Snapshot
from gateway.pipeline.auth import current_tenant


def _connect_to_nothing(*args):
    psycopg.connect(host="127.0.0.1", port=free_port(), connect_timeout=2)


def _refuse_a_value(*args):
    raise DataError("value too long for type character varying(64)")


def _run(coroutine):
    async def main():
        db = DatabaseThreads(size=1)
        try:
            return await coroutine(db)
        finally:
            await db.close()
    return asyncio.run(main())


def test_the_database_being_away_is_told_from_a_refused_value():
    assert database_unavailable(OperationalError("server closed the connection unexpectedly"))
    assert database_unavailable(sqlite3.OperationalError("database is locked"))
    assert database_unavailable(psycopg.OperationalError("connection refused"))
    assert database_unavailable(psycopg.errors.AdminShutdown("terminating connection"))
    for refused in (DataError("x"), IntegrityError("x"), ValueError("surrogates not allowed"),
                    psycopg.errors.ProgramLimitExceeded("index row size exceeds maximum")):
        assert not database_unavailable(refused), refused
    wrapped = OperationalError("row too big")
    wrapped.__cause__ = psycopg.errors.ProgramLimitExceeded("row too big")
    assert not database_unavailable(wrapped)  # about the row, however Django wrapped it


def test_request_path_database_work_answers_503_while_the_database_is_away():
    async def call(db):
        with pytest.raises(errors.GatewayError) as away:
            await db.request(_connect_to_nothing)
        with pytest.raises(DataError):  # not the database being away: the error it is
            await db.request(_refuse_a_value)
        return away.value

    away = _run(call)
    assert (away.status, away.code) == (503, "service_unavailable")
    assert dict(away.headers)[b"retry-after"] == b"2"


def test_an_unknown_tenant_while_the_database_is_away_is_a_503_not_tenant_required():
    """A key whose tenant the snapshot lacks makes the gateway refresh at once; with the database away
    that refresh cannot tell "no such tenant" from "not loaded yet", so the request is not refused as one."""
    key = KeyInfo(id=1, prefix="sy_live_ab12", tenant_id=7, user_id=None, scopes=frozenset({"inference"}),
                  expires_at=None, revoked=False)

    async def ask(db):
        state = SimpleNamespace(db=db, snapshot=Snapshot(), config=SimpleNamespace(default_user_rpm=120))
        state.db = SimpleNamespace(run=lambda func, *args: db.run(_connect_to_nothing))
        state.refresh_now = SnapshotRefresher(state, interval=1.0).refresh_now
        with pytest.raises(errors.GatewayError) as refused:
            await current_tenant(state, key)
        return refused.value

    refused = _run(ask)
    assert (refused.status, refused.code) == (503, "service_unavailable")


def test_a_database_that_refuses_every_write_is_away_not_a_reason_to_set_rows_aside():
    """A standby after a failover, a table or grant not there yet: no event of the batch could be stored."""
    from django.db import InternalError, ProgrammingError

    for driver, wrapper in ((psycopg.errors.ReadOnlySqlTransaction("read-only transaction"), InternalError),
                            (psycopg.errors.UndefinedTable("relation does not exist"), ProgrammingError),
                            (psycopg.errors.InsufficientPrivilege("permission denied"), ProgrammingError)):
        wrapped = wrapper(str(driver))
        wrapped.__cause__ = driver
        assert database_unavailable(driver) and database_unavailable(wrapped), driver
    assert not database_unavailable(psycopg.ProgrammingError("cannot adapt type 'object'"))
