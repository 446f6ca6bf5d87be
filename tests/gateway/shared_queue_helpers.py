"""Two (or more) gateway "processes" in one event loop, each with its own PoolQueues and Redis client,
sharing one pool's slots through the real Redis (tests/gateway/test_shared_slots.py)."""
from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.config.settings import GatewayConfig
from gateway.config.snapshot import Pool, Upstream
from gateway.limits.admission import make_client
from gateway.metering.metrics import GatewayMetrics
from gateway.routing.balancer import Balancer
from gateway.routing.pool_queues import PoolQueues
from gateway.routing.shared_slots import DEFAULT_SETTINGS, SharedSettings

POOLS = (Pool(7, 1, 1, "round_robin", True, tuple(
    Upstream(700 + i, f"http://127.0.0.1:{9100 + i}", 7, 1, False) for i in range(2)), None),)


class Flaky:
    """A real Redis client that can be made to fail (Redis gone mid-traffic), counting script calls."""

    def __init__(self, client):
        self.client, self.broken, self.calls = client, False, 0

    async def script_load(self, script):
        self._check()
        return await self.client.script_load(script)

    async def evalsha(self, *args):
        self._check()
        self.calls += 1
        return await self.client.evalsha(*args)

    def _check(self):
        if self.broken:
            raise RedisConnectionError("Redis is gone (test)")


@dataclass
class Process:
    """One gateway process's pool queue."""

    queues: PoolQueues
    client: Flaky
    metrics: GatewayMetrics
    tasks: list = field(default_factory=list)

    @property
    def queue(self):
        return self.queues.queue_for(POOLS)


def make_process(url: str, install: str, *, per_instance: int = 2, shared: bool = True,
                 settings: SharedSettings = DEFAULT_SETTINGS, tick: bool = True) -> Process:
    metrics = GatewayMetrics()
    client = Flaky(make_client(url))
    config = GatewayConfig(redis_url=url, queue_inflight_per_instance=per_instance, queue_shared=shared,
                           queue_max_per_tenant=1000, queue_max_wait=60)
    queues = PoolQueues(config, metrics, Balancer(metrics, eject_after=3), redis=client, settings=settings)
    queues.scope(install)
    process = Process(queues, client, metrics)
    if tick:
        process.tasks.append(asyncio.create_task(queues.run()))
    return process


async def stop(*processes: Process) -> None:
    for process in processes:
        process.queues.close()
        pumps = [q.shared._task for q in process.queues._queues.values() if q.shared and q.shared._task]
        for task in process.tasks:
            task.cancel()
        await asyncio.wait_for(asyncio.gather(*process.tasks, *pumps, return_exceptions=True), 10)
        await asyncio.wait_for(process.client.client.aclose(), 10)


def new_install() -> str:
    return "t" + uuid.uuid4().hex[:12]


async def forget(url: str, install: str) -> None:
    client = make_client(url)
    keys = [k async for k in client.scan_iter(match=f"sy:{install}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@dataclass
class Load:
    """Closed-loop clients: each waits for a slot, holds it `service` seconds, and goes again."""

    service: float = 0.02
    served: Counter = field(default_factory=Counter)  # tenant -> requests served after `counting_from`
    waits: dict = field(default_factory=dict)  # tenant -> seconds waited, per request
    errors: list = field(default_factory=list)
    peak: int = 0  # most slots held at once, over every process
    counting_from: float = 0.0

    async def client(self, process: Process, tenant: str, flow, processes: list[Process]) -> None:
        queue = process.queue
        while True:
            try:
                async with queue.slot(tenant, False, flow) as waited:
                    self.peak = max(self.peak, sum(p.queue.active for p in processes))
                    if time.monotonic() >= self.counting_from:
                        self.served[tenant] += 1
                        self.waits.setdefault(tenant, []).append(waited)
                    await asyncio.sleep(self.service)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 — a refused or failed admission is the finding
                self.errors.append(error)


async def run_load(placement: list[tuple[Process, str, int]], processes: list[Process], seconds: float,
                   warmup: float = 0.5, service: float = 0.02, during=None) -> Load:
    """Start `count` clients of each (process, tenant, count); count what is served after the warm-up."""
    load = Load(service=service, counting_from=time.monotonic() + warmup)
    tasks = [asyncio.create_task(load.client(process, tenant, f"{tenant}-{i}", processes))
             for process, tenant, count in placement for i in range(count)]
    if during is not None:
        await during(load)
    await asyncio.sleep(warmup + seconds)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return load


def shares(load: Load) -> dict[str, float]:
    total = sum(load.served.values())
    return {tenant: count / total for tenant, count in sorted(load.served.items())}
