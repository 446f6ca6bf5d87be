"""Fair queuing across every gateway process: a pool's slots and its tenants' turns, kept in Redis.

Each process's `FairQueue` orders its own waiters (tenants in turn, flows in turn within a tenant).
That alone is fair per process only: a heavy tenant whose requests land on two workers gets one
worker's slots to itself and its share of the other's. `SharedSlots` makes the *capacity* the
pool's (all processes together hold at most `capacity` slots) and the *turns* the install's: a
slot beyond a process's own share goes to the tenant that has had the least service among every
tenant waiting anywhere (start-time fair queuing on a per-tenant virtual time in Redis; each
grant adds 1 / weight). One Lua script (`lua/fair_share.lua`) does the bookkeeping atomically.

No Redis round trip while the pool is not saturated: a process takes up to its own share
(`capacity // live processes`) of the slots unasked. Only when it would exceed that, or when some
process has waiters or holds more than its share (the pool's *mode* key, which every process
reads on its tick, every `tick_seconds` while it has requests in flight), do its admissions and
releases go through the script — one call in flight per pool per process, coalesced.

Slots are leased: a process's count lapses `lease_ms` after its last report, so a killed worker's
slots come back by themselves. With Redis gone the queue falls back to per-process fairness
(its own share of the slots, its own turns), logs it once and counts
`switchyard_gateway_fair_queue_local_fallbacks_total`; requests keep being served.
"""
from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from redis.exceptions import NoScriptError, RedisError

log = logging.getLogger("gateway.fair_queue")
LUA = Path(__file__).with_name("lua")
FAIR_SHARE = (LUA / "fair_share.lua").read_text(encoding="utf-8")
FAIR_TICK = (LUA / "fair_tick.lua").read_text(encoding="utf-8")
REDIS_ERRORS = (RedisError, OSError, TimeoutError)


@dataclass(frozen=True, slots=True)
class SharedSettings:
    """The shared state's knobs (tests shorten them)."""

    lease_ms: int = 3000  # a silent process's slots and waiters lapse after this
    mode_ms: int = 1000  # how long one report keeps the pool in shared mode
    poll_seconds: float = 0.01  # a process with waiters asks again this often (slots freed elsewhere)
    tick_seconds: float = 0.1  # liveness and mode read, while the process has requests in flight
    idle_tick_seconds: float = 0.5
    slack: float = 1.0  # a tenant may be served this many requests (÷ weight) ahead of the least-served
    timeout_seconds: float = 1.0
    retry_after_seconds: float = 1.0  # after a Redis failure, per-process fairness at least this long


DEFAULT_SETTINGS = SharedSettings()


class Scripts:
    """EVALSHA with a load on first use and after a Redis restart."""

    def __init__(self, client):
        self.client = client
        self._sha: dict[str, str] = {}

    async def run(self, script: str, keys: list[str], args: list) -> list:
        sha = self._sha.get(script)
        if sha is None:
            sha = self._sha[script] = await self.client.script_load(script)
        try:
            return await self.client.evalsha(sha, len(keys), *keys, *args)
        except NoScriptError:
            self._sha[script] = await self.client.script_load(script)
            return await self.client.evalsha(self._sha[script], len(keys), *keys, *args)


class SharedSlots:
    """One pool's link between this process's FairQueue and the shared state (the queue's `shared`)."""

    def __init__(self, queue, scripts: Scripts, base: str, process: str, gateways: "Gateways",
                 settings: SharedSettings, metrics=None):
        self.queue = queue
        # Engaged from the start: until its first tick says whether the pool is saturated, a new
        # queue asks (its first report also tells the others that this process serves the pool).
        self.engaged = True
        self.informed = False  # no report answered and no tick read yet (FairQueue.full)
        self._scripts, self._process, self._gateways = scripts, process, gateways
        self._settings, self._metrics = settings, metrics
        self.keys = [f"{base}:{suffix}" for suffix in ("live", "inflight", "vt", "wait", "mode", "members", "pvt")]
        self.mode_key, self.members_key = self.keys[4], self.keys[5]
        self._reported = 0  # the slot count the shared state holds for this process
        self._tenants: set = set()  # tenants last reported with waiters
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self.broken_until = 0.0
        self.free = 0  # free slots at the last report (for tests and metrics)

    def limit(self, capacity: int) -> int:
        """The slots this process takes without asking: its share, or all of its share while Redis is away."""
        return capacity // max(1, self._gateways.live)

    def kick(self) -> None:
        """Something changed (a waiter, a release): report it soon — one call in flight at a time."""
        if time.monotonic() < self.broken_until:
            self.engaged = False
            self.queue.release_local()
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._pump(), name="gateway-fair-share")
        else:
            self._wake.set()

    def mode_seen(self, on: bool) -> None:
        """The tick read the pool's mode key: join (report this process's slots) or leave shared mode."""
        self.informed = True
        if on and not self.engaged:
            self.engaged = True
            self.kick()
        elif not on and not self.queue.waiting:
            self.engaged = False
            if self._reported:  # the shared state still counts slots of ours: bring it up to date
                self.kick()

    async def _pump(self) -> None:
        queue, settings = self.queue, self._settings
        while True:
            self._wake.clear()
            try:
                async with asyncio.timeout(settings.timeout_seconds):
                    reply = await self._report()
            except REDIS_ERRORS as error:
                self._fall_back(error)
                return
            self._apply(reply)
            if queue.waiting:
                try:
                    async with asyncio.timeout(settings.poll_seconds):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            elif (self._reported == queue.active or not self.engaged) and not self._wake.is_set():
                return

    async def _report(self) -> list:
        queue = self.queue
        waiting = queue.waiting_by_tenant()
        tenants = list(waiting) + [t for t in self._tenants if t not in waiting]
        args: list = [self._process, queue.active, queue.capacity, self.limit(queue.capacity),
                      self._settings.lease_ms, self._settings.mode_ms, self._settings.slack, len(tenants)]
        for tenant in tenants:
            args += [str(tenant), 1, waiting.get(tenant, 0)]
        reported = queue.active
        reply = await self._scripts.run(FAIR_SHARE, self.keys, args)
        self._reported = reported + sum(reply[2:])  # what the shared state now counts as ours
        self._tenants = set(waiting)
        return [tenants, reply]

    def _apply(self, result: list) -> None:
        tenants, reply = result
        mode, self.free = reply[0], reply[1]
        self.informed = True
        for tenant, count in zip(tenants, reply[2:]):
            for _ in range(count):
                self.queue.grant(tenant)  # a waiter gone meanwhile: the next report corrects the count
        self.engaged = bool(mode) or self.queue.waiting > 0

    def _fall_back(self, error: Exception) -> None:
        """Redis away: per-process fairness for a while; every waiter is served by the local turns."""
        if time.monotonic() >= self.broken_until:
            log.warning("fair queue: Redis unavailable (%s); per-process fairness until it answers",
                        type(error).__name__)
        self.broken_until = time.monotonic() + self._settings.retry_after_seconds
        if self._metrics is not None:
            self._metrics.fair_queue_fallbacks.inc()
        self.engaged = False
        self._reported = 0
        self.queue.release_local()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


class Gateways:
    """How many gateway processes of this install are alive (a process's own share of a pool's slots)."""

    def __init__(self, key: str = "") -> None:
        self.live = 1
        self.key = key  # the install's registry of live gateway processes
        self.process = f"{os.getpid()}-{secrets.token_hex(4)}"

    async def tick(self, scripts: Scripts, pools: list[SharedSlots], lease_ms: int) -> None:
        """Say this process is alive, read how many are, and each pool's mode."""
        keys = [self.key, *(k for p in pools for k in (p.mode_key, p.members_key))]
        reply = await scripts.run(FAIR_TICK, keys, [self.process, lease_ms])
        self.live = max(1, reply[0])
        for pool, on in zip(pools, reply[1:]):
            pool.mode_seen(bool(on))
