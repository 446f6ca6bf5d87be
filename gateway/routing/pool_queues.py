"""When a pool counts as saturated, and the fair queue per pool that requests wait in then.

Saturation is this gateway's own in-flight count: a pool of N usable engines holds at most
`queue_inflight_per_instance × N` of this gateway's requests; more wait in the pool's
`FairQueue`. (The engines' scraped `num_requests_waiting` is not used: the snapshot does not
reload when metrics change, so it would be stale, and a stale "full" could hold waiters that
nothing in this gateway ever releases.)
"""
from __future__ import annotations

from gateway.config.snapshot import Pool
from gateway.routing.fair_queue import FairQueue, QueueLimits

MAX_IDLE_QUEUES = 64  # queues of pools that changed shape are dropped once idle
MAX_CACHED_POOLS = 256


class PoolQueues:
    """One fair queue per set of routable deployments, sized from its usable engines."""

    def __init__(self, config, metrics, balancer):
        self._per_instance = config.queue_inflight_per_instance
        self._limits = QueueLimits(config.queue_max, config.queue_max_per_tenant, config.queue_max_wait)
        self._metrics = metrics
        self._balancer = balancer
        self._queues: dict[tuple, FairQueue] = {}
        # Per pools tuple, by identity (a snapshot hands out the same tuple on every request):
        # (the tuple, its queue, its engine count). Holding the tuple keeps its id from being reused.
        self._by_pools: dict[int, tuple] = {}

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
        return queue

    def saturated(self, pools: tuple[Pool, ...]) -> bool:
        """Would a request for these pools have to wait (or is nothing routable)?"""
        queue = self.queue_for(pools)
        return queue.capacity == 0 or queue.saturated

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
        self._by_pools.clear()  # it may hold a dropped queue: one shape must never have two
