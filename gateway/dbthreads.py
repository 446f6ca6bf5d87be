"""The threads the gateway's ORM work runs in: a small pool of its own, off the event loop.

Like `asyncio.to_thread`, but bounded (the database sees at most `size` gateway connections)
and closable: Django connections are per thread, so shutdown closes them in every worker.
"""
from __future__ import annotations

import asyncio
import functools
import threading
from concurrent.futures import ThreadPoolExecutor


class DatabaseThreads:
    """Runs sync ORM callables in worker threads; `close()` closes their connections."""

    def __init__(self, size: int = 4):
        self._size = size
        self._pool = ThreadPoolExecutor(size, thread_name_prefix="gateway-db")

    async def run(self, func, *args):
        """Await func(*args) in a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(func, *args))

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
