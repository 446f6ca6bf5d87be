"""Fair admission to a saturated pool: one queue per tenant, served in turn; within a tenant, one line per flow.

A `FairQueue` is a counting gate with `capacity` slots. While a slot is free and nobody waits,
`enter()` takes one at once. Otherwise the caller waits in its tenant's queue; each freed slot
goes to the next tenant in turn, so a tenant that sends 50 requests cannot push another tenant's 5
behind all of them. Within a tenant, interactive requests go before batch ones, and waiters are
served in turn across *flows* — an editor / agent session (`x-switchyard-session`), else the API
key — so one runaway agent session cannot starve its own tenant's IDE users either. Waiting is
bounded: the queue refuses newcomers beyond `max_total` / `max_per_tenant` (`QueueFull`), and a
waiter gives up after `max_wait` seconds (`QueueTimeout`). Pure asyncio, no I/O.

Across gateway processes the queue can hand the choice of *which tenant* gets a freed slot to a
`gateway.routing.shared_slots.SharedSlots` (Redis): then `limit` (this process's own share of the
slots, taken without asking anyone) may be below `capacity`, and slots beyond it are granted by
the shared state (`grant`). Without one, `limit == capacity`, as before.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Callable, Hashable, Protocol


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


class Coordinator(Protocol):
    """What a queue asks of the shared (cross-process) slot state; see shared_slots.SharedSlots."""

    engaged: bool  # slots are granted by the shared state now (every process is told to ask it)
    informed: bool  # the shared state has answered (a report or a tick) since this queue was made

    def limit(self, capacity: int) -> int: ...

    def kick(self) -> None: ...


@dataclass(slots=True, eq=False)  # identity: `in` and `remove` find this very waiter
class _Waiter:
    tenant: Hashable
    batch: bool
    flow: Hashable = None
    future: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass(slots=True)
class _Flows:
    """One line per flow, served in turn (a flow with waiters left goes to the back)."""

    lines: dict = field(default_factory=dict)
    turns: deque = field(default_factory=deque)
    size: int = 0

    def append(self, waiter: _Waiter) -> None:
        line = self.lines.get(waiter.flow)
        if line is None:
            line = self.lines[waiter.flow] = deque()
            self.turns.append(waiter.flow)
        line.append(waiter)
        self.size += 1

    def popleft(self) -> _Waiter:
        flow = self.turns.popleft()
        line = self.lines[flow]
        waiter = line.popleft()
        if line:
            self.turns.append(flow)
        else:
            del self.lines[flow]
        self.size -= 1
        return waiter

    def remove(self, waiter: _Waiter) -> bool:
        line = self.lines.get(waiter.flow)
        if line is None or waiter not in line:
            return False
        line.remove(waiter)
        self.size -= 1
        if not line:
            del self.lines[waiter.flow]
            self.turns.remove(waiter.flow)
        return True


@dataclass(slots=True)
class _TenantQueue:
    interactive: _Flows = field(default_factory=_Flows)
    batch: _Flows = field(default_factory=_Flows)

    def __len__(self) -> int:
        return self.interactive.size + self.batch.size

    def pop(self) -> _Waiter:
        return self.interactive.popleft() if self.interactive.size else self.batch.popleft()


class FairQueue:
    """`capacity` slots; waiters per tenant, tenants served in turn, flows in turn within a tenant."""

    def __init__(self, capacity: int, limits: QueueLimits = QueueLimits(), *,
                 on_depth: Callable[[Hashable, int], None] | None = None):
        self.capacity = capacity
        self.limits = limits
        self.active = 0
        self.shared: Coordinator | None = None
        self._queues: dict[Hashable, _TenantQueue] = {}
        self._turns: deque = deque()  # tenants with waiters, next to be served first
        self._waiting = 0
        self._on_depth = on_depth or (lambda tenant, delta: None)

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def limit(self) -> int:
        """Slots this process takes on its own (all of them without a shared state)."""
        shared = self.shared
        return self.capacity if shared is None else shared.limit(self.capacity)

    @property
    def saturated(self) -> bool:
        """A newcomer would have to wait (no free slot, others already wait, or the shared state decides)."""
        shared = self.shared
        if shared is not None and shared.engaged:
            return True
        return self.active >= self.limit or self._waiting > 0

    @property
    def full(self) -> bool:
        """Would a newcomer wait, as far as this process knows (the fallback decision)?

        A new queue asks the shared state before it takes a slot (`saturated`) until it first hears
        from it; that says nothing about the pool being busy, so until then only its own waiters and
        slots count: else a pool this process has not served yet would look full and a request that
        could go to its fallback model would queue for the primary instead.
        """
        shared = self.shared
        if shared is not None and not shared.informed:
            return self._waiting > 0 or self.active >= self.capacity
        return self.saturated

    def depth(self, tenant: Hashable) -> int:
        queue = self._queues.get(tenant)
        return len(queue) if queue else 0

    def waiting_by_tenant(self) -> dict[Hashable, int]:
        return {tenant: len(queue) for tenant, queue in self._queues.items()}

    def try_enter(self) -> bool:
        """Take a slot without waiting; False when the caller would have to queue."""
        if self.saturated:
            return False
        self.active += 1
        return True

    async def enter(self, tenant: Hashable, batch: bool = False, flow: Hashable = None) -> float:
        """Take a slot, waiting in the tenant's queue (the flow's line) if needed; returns the seconds waited."""
        if self.try_enter():
            return 0.0
        waiter = self._enqueue(tenant, batch, flow)
        started = time.monotonic()
        if self.shared is not None:
            self.shared.kick()
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
        """Give a slot back; it goes to the next waiter in turn (or the shared state is told)."""
        self.active = max(0, self.active - 1)
        shared = self.shared
        if shared is not None and shared.engaged:
            shared.kick()
        else:
            self._grant()

    def resize(self, capacity: int) -> None:
        """New capacity (the pool grew or shrank); waiters move in if it grew."""
        self.capacity = capacity
        self.release_local()

    def release_local(self) -> None:
        """Grant free local slots to waiters in turn (unless the shared state grants them)."""
        shared = self.shared
        if shared is None or not shared.engaged:
            self._grant()

    def grant(self, tenant: Hashable) -> bool:
        """The shared state granted `tenant` a slot: its next waiter (flows in turn) takes it."""
        queue = self._queues.get(tenant)
        while queue:
            waiter = self._pop_from(tenant, queue)
            if not waiter.future.done():  # a cancelled one has not run its clean-up yet: skip it
                self.active += 1
                waiter.future.set_result(None)
                return True
            queue = self._queues.get(tenant)
        return False

    @asynccontextmanager
    async def slot(self, tenant: Hashable, batch: bool = False, flow: Hashable = None):
        """`enter` … `leave` as a context; yields the seconds waited."""
        waited = await self.enter(tenant, batch, flow)
        try:
            yield waited
        finally:
            self.leave()

    def _enqueue(self, tenant: Hashable, batch: bool, flow: Hashable) -> _Waiter:
        if self.depth(tenant) >= self.limits.max_per_tenant:
            raise QueueFull("tenant")
        if self._waiting >= self.limits.max_total:
            raise QueueFull("pool")
        waiter = _Waiter(tenant, batch, flow)
        queue = self._queues.get(tenant)
        if queue is None:
            queue = self._queues[tenant] = _TenantQueue()
            self._turns.append(tenant)
        (queue.batch if batch else queue.interactive).append(waiter)
        self._waiting += 1
        self._on_depth(tenant, 1)
        return waiter

    def _grant(self) -> None:
        limit = self.limit
        while self.active < limit and self._turns:
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

    def _pop_from(self, tenant: Hashable, queue: _TenantQueue) -> _Waiter:
        """`tenant`'s next waiter, out of turn (the shared state chose the tenant)."""
        waiter = queue.pop()
        self._forget(waiter)
        if not queue:
            del self._queues[tenant]
            self._turns.remove(tenant)
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
        if queue.interactive.remove(waiter) or queue.batch.remove(waiter):
            self._forget(waiter)
        if not queue:
            del self._queues[waiter.tenant]
            self._turns.remove(waiter.tenant)
        if self.shared is not None:
            self.shared.kick()  # the shared state hears of one waiter less
