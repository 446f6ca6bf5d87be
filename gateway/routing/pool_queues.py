"""When a pool counts as saturated, and the fair queue per pool that requests wait in then.

Saturation is counted in slots: a pool of N usable engines holds at most
`queue_inflight_per_instance × N` requests in flight; more wait in the pool's `FairQueue`. With a
Redis (the usual case: the gateway needs one for its limits) the slots are the pool's across every
gateway process, and a freed slot goes to the least-served waiting tenant whichever process its
request landed on (`gateway.routing.shared_slots`; on unless `queue_shared` is false); each process takes its
own share of the slots without a round trip. Otherwise each process counts its own requests only.
(The engines' scraped `num_requests_waiting` is not used: the snapshot does not reload when
metrics change, so it would be stale, and a stale "full" could hold waiters that nothing in this
gateway ever releases.)
"""
from __future__ import annotations

import asyncio
import logging

from controlplane import redis_keys
from gateway.config.snapshot import Pool
from gateway.routing.fair_queue import FairQueue, QueueLimits
from gateway.routing.shared_slots import (
    DEFAULT_SETTINGS,
    REDIS_ERRORS,
    Gateways,
    Scripts,
    SharedSettings,
    SharedSlots,
)

log = logging.getLogger("gateway.fair_queue")
MAX_IDLE_QUEUES = 64  # queues of pools that changed shape are dropped once idle
MAX_CACHED_POOLS = 256


class PoolQueues:
    """One fair queue per set of routable deployments, sized from its usable engines."""

    def __init__(self, config, metrics, balancer, *, redis=None, settings: SharedSettings = DEFAULT_SETTINGS):
        self._per_instance = config.queue_inflight_per_instance
        self._limits = QueueLimits(config.queue_max, config.queue_max_per_tenant, config.queue_max_wait)
        self._metrics = metrics
        self._balancer = balancer
        self._queues: dict[tuple, FairQueue] = {}
        # Per pools tuple, by identity (a snapshot hands out the same tuple on every request):
        # (the tuple, its queue, its engine count). Holding the tuple keeps its id from being reused.
        self._by_pools: dict[int, tuple] = {}
        self._scripts = Scripts(redis) if redis is not None and config.queue_shared else None
        self._settings = settings
        self._prefix: str | None = None  # `sy:<install>:fq`, once the install id is known
        self.gateways = Gateways()
        self._shared: dict[tuple, SharedSlots] = {}  # per shape, the queue's link to the shared state

    def scope(self, install_id: str) -> None:
        """From now on the slots are shared with the install's other gateway processes (needs a Redis)."""
        if self._scripts is not None and self._prefix is None:
            self._prefix = redis_keys.part_prefix(install_id, redis_keys.FAIR_QUEUE)
            self.gateways.key = f"{self._prefix}:gateways"
            for shape, queue in self._queues.items():
                self._share(shape, queue)

    def queue_for(self, pools: tuple[Pool, ...]) -> FairQueue:
        """The pools' queue, its capacity updated to the engines usable right now."""
        entry = self._by_pools.get(id(pools))
        if entry is None:
            if len(self._by_pools) >= MAX_CACHED_POOLS:  # old snapshots' tuples: let them go
                self._by_pools.clear()
            entry = self._by_pools[id(pools)] = (pools, self._queue_of(pools), sum(len(p.upstreams) for p in pools))
        _, queue, engines = entry
        capacity = self._per_instance * (self._usable(pools) if self._balancer.ejected else engines)
        if capacity != queue.capacity:
            queue.resize(capacity)
        return queue

    def _queue_of(self, pools: tuple[Pool, ...]) -> FairQueue:
        shape = tuple(p.deployment_id for p in pools if p.upstreams)
        queue = self._queues.get(shape)
        if queue is None:
            self._prune()
            queue = self._queues[shape] = FairQueue(0, self._limits, on_depth=self._depth_changed)
            self._share(shape, queue)
        return queue

    def _share(self, shape: tuple, queue: FairQueue) -> None:
        if self._prefix is None or self._scripts is None or queue.shared is not None:
            return
        base = f"{self._prefix}:{{{','.join(map(str, shape))}}}"  # one hash slot per pool
        queue.shared = self._shared[shape] = SharedSlots(queue, self._scripts, base, self.gateways.process,
                                                         self.gateways, self._settings, self._metrics)

    def saturated(self, pools: tuple[Pool, ...]) -> bool:
        """Would a request for these pools have to wait (or is nothing routable)?"""
        queue = self.queue_for(pools)
        return queue.capacity == 0 or queue.full

    async def run(self) -> None:
        """Tick: this process is alive (its share of every pool's slots), and which pools share their slots now."""
        if self._scripts is None:
            return
        settings, warned = self._settings, False
        while True:
            # Every pool's mode is read, not only busy ones': an idle process that starts taking
            # requests should know at once whether it may take its share unasked.
            shared = list(self._shared.values())
            busy = any(s.engaged or s.queue.active or s.queue.waiting for s in shared)
            if self._prefix is not None:
                try:
                    async with asyncio.timeout(settings.timeout_seconds):
                        await self.gateways.tick(self._scripts, shared, settings.lease_ms)
                    warned = False
                except REDIS_ERRORS as error:
                    if not warned:
                        log.warning("fair queue tick: Redis unavailable (%s)", type(error).__name__)
                        warned = True
            await asyncio.sleep(settings.tick_seconds if busy else settings.idle_tick_seconds)

    def close(self) -> None:
        """Stop the queues' reports to the shared state (shutdown)."""
        for shared in self._shared.values():
            shared.close()

    def _usable(self, pools: tuple[Pool, ...]) -> int:
        ejected = self._balancer.ejected
        return sum(1 for p in pools for u in p.upstreams if u.instance_id not in ejected)

    def _depth_changed(self, tenant, delta: int) -> None:
        self._metrics.queue_depth.labels(str(tenant)).inc(delta)

    def _prune(self) -> None:
        if len(self._queues) < MAX_IDLE_QUEUES:
            return
        for shape in [s for s, q in self._queues.items() if not q.active and not q.waiting]:
            del self._queues[shape]
            shared = self._shared.pop(shape, None)
            if shared is not None:
                shared.close()
        self._by_pools.clear()  # it may hold a dropped queue: one shape must never have two
