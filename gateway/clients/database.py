"""The threads the gateway's ORM work runs in: a small pool of its own, off the event loop.

Like `asyncio.to_thread`, but bounded (the database sees at most `size` gateway connections)
and closable: Django connections are per thread, so shutdown closes them in every worker.
`request()` is for work a request waits on: a database that is away (down, restarting, locked)
becomes the OpenAI-shaped 503 `service_unavailable` instead of an exception, so every database
touch on the request path degrades the same way (docs/errors.md).
"""
from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor

from gateway import errors

log = logging.getLogger("gateway.db")


def _driver_errors() -> tuple[tuple, tuple]:
    """psycopg's (away, about the row) classes beyond its OperationalError/InterfaceError; () without it."""
    try:
        from psycopg import errors
    except ImportError:  # SQLite-only installs
        return (), ()
    # Away: the database refuses every write, not this one — a standby after a failover (read-only), a
    # schema or grant not in place yet. Splitting such a batch would only set every event aside.
    away = (errors.OperationalError, errors.InterfaceError, errors.ReadOnlySqlTransaction, errors.UndefinedTable,
            errors.UndefinedColumn, errors.InsufficientPrivilege)
    # About the row, though PostgreSQL files it under operational errors (an index row too big, say):
    # retrying it later would fail the same way forever.
    return away, (errors.ProgramLimitExceeded,)


_DRIVER_AWAY, _DRIVER_ROW = _driver_errors()
_SQLITE_AWAY = (sqlite3.OperationalError, sqlite3.InterfaceError)


def database_unavailable(error: BaseException) -> bool:
    """Is this the database being away (unreachable, restarting, locked, connection lost) rather than
    something wrong with what was sent? The first is retried later; the second never succeeds as is."""
    from django.db import Error, InterfaceError, OperationalError

    # Django wraps the driver's error (its __cause__); the usage COPY runs on psycopg's own cursor, unwrapped.
    driver = error.__cause__ if isinstance(error, Error) and error.__cause__ is not None else error
    if isinstance(driver, _DRIVER_ROW):
        return False
    return isinstance(error, (OperationalError, InterfaceError, *_SQLITE_AWAY)) or isinstance(driver, _DRIVER_AWAY)


class DatabaseThreads:
    """Runs sync ORM callables in worker threads; `close()` closes their connections."""

    def __init__(self, size: int = 4):
        self._size = size
        self._pool = ThreadPoolExecutor(size, thread_name_prefix="gateway-db")

    async def run(self, func, *args):
        """Await func(*args) in a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(func, *args))

    async def request(self, func, *args):
        """`run`, for a request: the database being away raises `errors.database_unavailable()` (503)."""
        try:
            return await self.run(func, *args)
        except Exception as error:
            if database_unavailable(error):
                log.warning("database unavailable on the request path: %s", type(error).__name__)
                raise errors.database_unavailable() from error
            raise

    async def close(self) -> None:
        """Close every worker's connection, then stop the pool."""
        # Each job waits at the barrier until all have started, so every job holds its own thread.
        barrier = threading.Barrier(self._size)
        await asyncio.gather(*(self.run(_close_connections, barrier) for _ in range(self._size)),
                             return_exceptions=True)
        self._pool.shutdown(wait=False)


def _close_connections(barrier: threading.Barrier) -> None:
    from django.db import connections

    connections.close_all()
    barrier.wait(timeout=5)
