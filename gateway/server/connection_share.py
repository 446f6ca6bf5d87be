"""Even connections across `--workers`: each worker sheds keep-alive connections above its share.

`SO_REUSEPORT` hashes each new connection to one worker's socket, so a client that holds a few
long-lived connections (a fronting proxy's keep-alive pool, a load generator's 32) can leave
one worker with 20 and another with 12 — one saturated while the other idles. Every worker
publishes its open connection count in a small shared file (one 8-byte slot per worker, written
only by its owner, read by all); a worker holding more than its fair share plus `SLACK` answers
its next request with `connection: close`, and the client's reconnect is hashed afresh. Only
connections already in use are closed, after a complete response, so nothing is lost; the
worst a stale read of another slot can do is shed one connection too many or too few.
"""
from __future__ import annotations

import mmap
import os
import struct

SLACK = 1
ENV = "SWITCHYARD_GATEWAY_BALANCE"  # "<path>:<worker index>:<workers>", set by the supervisor
_SLOT = struct.Struct("=q")


def create_table(path: str, workers: int) -> None:
    """The supervisor's part: a zeroed file with one slot per worker."""
    with open(path, "wb") as table:
        table.write(b"\0" * (_SLOT.size * workers))


class ConnectionShare:
    """One worker's view of the shared table."""

    def __init__(self, path: str, index: int, workers: int):
        self.index, self.workers = index, workers
        with open(path, "r+b") as table:
            self._map = mmap.mmap(table.fileno(), _SLOT.size * workers)
        # The slots as native 8-byte integers: the same bytes as _SLOT on every platform we run on.
        self._slots = memoryview(self._map).cast("q")
        self.open = 0  # this worker's connections that are not already being shed
        self._publish()

    @classmethod
    def from_env(cls) -> "ConnectionShare | None":
        spec = os.environ.get(ENV)
        if not spec:
            return None
        path, index, workers = spec.rsplit(":", 2)
        return cls(path, int(index), int(workers))

    def opened(self) -> None:
        self.open += 1
        self._publish()

    def closed(self, was_shed: bool) -> None:
        if not was_shed:
            self.open -= 1
            self._publish()

    def should_shed(self) -> bool:
        """True when this worker holds more than its fair share; the caller then closes one."""
        if self.open <= -(-sum(self._slots) // self.workers) + SLACK:  # the ceiling of the mean
            return False
        self.open -= 1  # counted as gone now, so the next requests do not shed it too
        self._publish()
        return True

    def _publish(self) -> None:
        self._slots[self.index] = self.open
