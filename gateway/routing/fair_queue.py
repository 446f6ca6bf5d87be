"""Fair admission to a saturated pool: one queue per tenant, served round-robin.

A `FairQueue` is a counting gate with `capacity` slots. While a slot is free and nobody waits,
`enter()` takes one at once. Otherwise the caller waits in its tenant's queue; each freed slot
goes to the next tenant in turn (interactive before batch within a tenant), so a tenant that
sends 50 requests cannot push another tenant's 5 behind all of them. Waiting is bounded: the
queue refuses newcomers beyond `max_total` / `max_per_tenant` (`QueueFull`), and a waiter gives
up after `max_wait` seconds (`QueueTimeout`). Pure asyncio, no I/O.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Callable, Hashable


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """How much waiting a queue allows."""

    max_total: int = 1000
    max_per_tenant: int = 100
    max_wait: float = 30.0


class QueueFull(Exception):
    """No room to wait: the caller answers 429."""

    def __init__(self, scope: str):
        super().__init__(f"the {scope} queue is full")
        self.scope = scope  # "tenant" or "pool"


class QueueTimeout(Exception):
    """Waited `max_wait` without getting a slot: the caller answers 503."""


@dataclass(slots=True, eq=False)  # identity: `in` and `remove` find this very waiter
class _Waiter:
    tenant: Hashable
    batch: bool
    future: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass(slots=True)
class _TenantQueue:
    interactive: deque = field(default_factory=deque)
    batch: deque = field(default_factory=deque)

    def __len__(self) -> int:
        return len(self.interactive) + len(self.batch)

    def pop(self) -> _Waiter:
        return self.interactive.popleft() if self.interactive else self.batch.popleft()


class FairQueue:
    """`capacity` slots; waiters per tenant, tenants served in turn."""

    def __init__(self, capacity: int, limits: QueueLimits = QueueLimits(), *,
                 on_depth: Callable[[Hashable, int], None] | None = None):
        self.capacity = capacity
        self.limits = limits
        self.active = 0
        self._queues: dict[Hashable, _TenantQueue] = {}
        self._turns: deque = deque()  # tenants with waiters, next to be served first
        self._waiting = 0
        self._on_depth = on_depth or (lambda tenant, delta: None)

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def saturated(self) -> bool:
        """A newcomer would have to wait (no free slot, or others already wait)."""
        return self.active >= self.capacity or self._waiting > 0

    def depth(self, tenant: Hashable) -> int:
        queue = self._queues.get(tenant)
        return len(queue) if queue else 0

    def try_enter(self) -> bool:
        """Take a slot without waiting; False when the caller would have to queue."""
        if self.saturated:
            return False
        self.active += 1
        return True

    async def enter(self, tenant: Hashable, batch: bool = False) -> float:
        """Take a slot, waiting in the tenant's queue if needed; returns the seconds waited."""
        if self.try_enter():
            return 0.0
        waiter = self._enqueue(tenant, batch)
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.limits.max_wait):
                await waiter.future
        except TimeoutError:
            self._give_up(waiter)
            raise QueueTimeout(f"no slot within {self.limits.max_wait} s") from None
        except BaseException:  # cancelled: the client left
            self._give_up(waiter)
            raise
        return time.monotonic() - started

    def leave(self) -> None:
        """Give a slot back; it goes to the next waiter in turn."""
        self.active = max(0, self.active - 1)
        self._grant()

    def resize(self, capacity: int) -> None:
        """New capacity (the pool grew or shrank); waiters move in if it grew."""
        self.capacity = capacity
        self._grant()

    @asynccontextmanager
    async def slot(self, tenant: Hashable, batch: bool = False):
        """`enter` … `leave` as a context; yields the seconds waited."""
        waited = await self.enter(tenant, batch)
        try:
            yield waited
        finally:
            self.leave()

    def _enqueue(self, tenant: Hashable, batch: bool) -> _Waiter:
        if self.depth(tenant) >= self.limits.max_per_tenant:
            raise QueueFull("tenant")
        if self._waiting >= self.limits.max_total:
            raise QueueFull("pool")
        waiter = _Waiter(tenant, batch)
        queue = self._queues.get(tenant)
        if queue is None:
            queue = self._queues[tenant] = _TenantQueue()
            self._turns.append(tenant)
        (queue.batch if batch else queue.interactive).append(waiter)
        self._waiting += 1
        self._on_depth(tenant, 1)
        return waiter

    def _grant(self) -> None:
        while self.active < self.capacity and self._turns:
            waiter = self._next()
            if waiter.future.done():  # cancelled, its task has not run its clean-up yet
                continue
            self.active += 1
            waiter.future.set_result(None)

    def _next(self) -> _Waiter:
        """The next tenant's next waiter; the tenant goes to the back of the line."""
        tenant = self._turns.popleft()
        queue = self._queues[tenant]
        waiter = queue.pop()
        self._forget(waiter)
        if queue:
            self._turns.append(tenant)
        else:
            del self._queues[tenant]
        return waiter

    def _forget(self, waiter: _Waiter) -> None:
        self._waiting -= 1
        self._on_depth(waiter.tenant, -1)

    def _give_up(self, waiter: _Waiter) -> None:
        """A waiter leaves: out of its queue, or, if a slot reached it meanwhile, the slot moves on."""
        if waiter.future.done() and not waiter.future.cancelled():
            self.leave()  # granted at the very moment it gave up
            return
        waiter.future.cancel()
        queue = self._queues.get(waiter.tenant)
        if queue is None:
            return
        for line in (queue.interactive, queue.batch):
            if waiter in line:
                line.remove(waiter)
                self._forget(waiter)
        if not queue:
            del self._queues[waiter.tenant]
            self._turns.remove(waiter.tenant)
