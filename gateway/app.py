"""The gateway: a plain ASGI callable (no Django request handling) with its own lifespan.

Start-up opens one shared upstream client to the engines (gateway.clients.engine), one Redis client,
loads the first snapshot and starts three background tasks: the snapshot refresher, the usage writer and
(inside the refresher) the probe that readmits ejected engines.
"""
from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from controlplane import redis_keys
from gateway import errors
from gateway.clients.database import DatabaseThreads, database_unavailable
from gateway.clients.engine import UpstreamClient
from gateway.clients.pipelined_redis import PipelinedRedis
from gateway.config.change_bus import ChangeBus
from gateway.config.key_cache import KeyCache
from gateway.config.refresher import SnapshotRefresher, load_current
from gateway.config.settings import GatewayConfig
from gateway.config.snapshot import Snapshot
from gateway.config.snapshot_loader import load_key
from gateway.limits.limiter import Limiter
from gateway.metering.demand import DemandSignal
from gateway.metering.metrics import GatewayMetrics
from gateway.metering.recorder import UsageRecorder, write_batch
from gateway.metering.spool import DEAD_LETTER_NAME, DeadLetter, UsageSpool
from gateway.pipeline.asgi_io import JSON_HEADERS, request_ids, send_error, send_plain_error, send_response
from gateway.pipeline.auth import authenticate, current_tenant
from gateway.pipeline.dedup import DedupCache
from gateway.pipeline.feedback import handle_feedback
from gateway.pipeline.inference import InferenceHandler
from gateway.pipeline.proxy import Timeouts
from gateway.pipeline.redaction import redact_prefix
from gateway.pipeline.supersede import Superseder
from gateway.pipeline.wake import Waker
from gateway.routing.balancer import Balancer
from gateway.routing.pool_queues import PoolQueues
from gateway.routing.prefix_warmup import PrefixWarmer

log = logging.getLogger("gateway")
GC_YOUNG_THRESHOLD = 20_000
ROUTES = {
    "/v1/chat/completions": "POST",
    "/v1/completions": "POST",
    "/v1/models": "GET",
    "/v1/feedback": "POST",
    "/healthz": "GET",
}  # /metrics is served on a listener of its own (gateway.metering.exposition), never here
GAUGE_REFRESH_SECONDS = 1.0  # how stale another `--workers` worker's live gauges may be in a scrape


@dataclass
class GatewayState:
    """What requests share while the gateway runs; built at start-up, torn down at shutdown."""

    config: GatewayConfig
    metrics: GatewayMetrics
    keys: KeyCache
    balancer: Balancer
    limiter: Limiter
    recorder: UsageRecorder
    upstream: UpstreamClient
    timeouts: Timeouts
    redis: Any  # gateway.clients.pipelined_redis.PipelinedRedis, or a redis-py client
    db: DatabaseThreads
    queues: PoolQueues
    dedup: DedupCache
    supersede: Superseder
    waker: Waker = field(default_factory=Waker)
    demand: DemandSignal = field(default_factory=lambda: DemandSignal(None))  # in flight per deployment
    snapshot: Snapshot = field(default_factory=Snapshot)
    warmer: PrefixWarmer | None = None  # fills joining engines' prefix caches (gateway.routing.prefix_warmup)
    refresh_now: Callable[[], Awaitable[bool]] | None = None  # the refresher's on-demand refresh
    started_at: float = field(default_factory=time.time)


class GatewayApp:
    """The ASGI application. One instance per process; nothing global."""

    def __init__(self, config: GatewayConfig, *, usage_writer=write_batch):
        self.config = config
        self.metrics = GatewayMetrics()
        self._usage_writer = usage_writer
        self.state: GatewayState = None  # type: ignore[assignment]  # set by the lifespan start-up, before any request
        self.refresher: SnapshotRefresher | None = None
        self.bus: ChangeBus | None = None
        self._inference: InferenceHandler = None  # type: ignore[assignment]  # likewise
        self._tasks: list[asyncio.Task] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope, receive, send) -> None:
        path, method = scope["path"], scope["method"]
        if path == "/v1/chat/completions" and method == "POST":
            return await self._inference.handle(scope, receive, send, "chat")
        if path == "/v1/completions" and method == "POST":
            return await self._inference.handle(scope, receive, send, "completions")
        _, ids = request_ids(scope)
        expected = ROUTES.get(path)
        if expected is None:
            # The path is request text like any other: echoed with its secrets redacted.
            return await send_plain_error(send, 404, "not_found", f"No route {redact_prefix(path, 200)}.", ids)
        if method != expected:
            return await send_plain_error(send, 405, "method_not_allowed", f"Use {expected} for {path}.", ids)
        if path == "/v1/models":
            return await self._models(scope, send, ids)
        if path == "/v1/feedback":
            return await handle_feedback(self.state, scope, receive, send)
        await self._healthz(send, ids)

    async def _models(self, scope, send, ids: list) -> None:
        """The models this key may use and that have a routable engine for its tenant."""
        try:
            key = await authenticate(scope, self.state.keys)
            await current_tenant(self.state, key)
        except errors.GatewayError as error:
            return await send_error(send, error, ids)
        created = int(self.state.started_at)
        data = [{"id": name, "object": "model", "created": created, "owned_by": "switchyard"}
                for name in self.state.snapshot.models_for(key)]
        body = json.dumps({"object": "list", "data": data}).encode()
        await send_response(send, 200, body, [*JSON_HEADERS, *ids])

    def render_metrics(self) -> bytes:
        """The metrics listener's body: the live gauges brought up to date, then every series."""
        if self.state is not None:
            self.state.recorder.export_gauges()
        return self.metrics.render()

    async def _refresh_gauges(self) -> None:
        """With `--workers`, a scrape reads the other workers' gauges from their files: keep them fresh."""
        while True:
            await asyncio.sleep(GAUGE_REFRESH_SECONDS)
            self.state.recorder.export_gauges()
            self.metrics.refresh_gauges()

    async def _healthz(self, send, ids: list) -> None:
        age = time.monotonic() - self.state.snapshot.loaded_at
        state = self.state
        redis = self._redis_health()
        body = json.dumps({"status": "ok" if redis["configured"] else "unavailable",
                           "snapshot_age_seconds": round(age, 3), "worker_pid": os.getpid(),
                           # False after a start-up without the database, until it returns.
                           "snapshot_loaded": state.snapshot.version != (),
                           "usage_database_away": state.recorder.database_away,
                           # False: this worker's requests are not superseded (docs/supersession.md).
                           "supersession_subscribed": state.supersede.subscribed,
                           "redis": redis, "change_bus": self._bus_health()}).encode()
        # Without a Redis every inference request is refused: not ready for traffic.
        await send_response(send, 200 if redis["configured"] else 503, body, [*JSON_HEADERS, *ids])

    def _redis_health(self) -> dict:
        """Whether there is a Redis at all, and whether its keys are scoped (the install id is known)."""
        if not self.config.redis_url:
            return {"configured": False, "scoped": False, "problem": (
                "no Redis configured (SWITCHYARD_GATEWAY_REDIS_URL or REDIS_URL): inference requests are refused "
                "with 503 redis_not_configured, because limits and budgets cannot be kept")}
        return {"configured": True, "scoped": self.state.limiter.scoped, "problem": None}

    def _bus_health(self) -> dict:
        """Whether changes arrive on the bus (else the refresher polls), and how many full reloads happened."""
        bus, refresher = self.bus, self.refresher
        return {"connected": bool(refresher and refresher.bus_connected), "last_seq": bus.last_seq if bus else None,
                "gaps": bus.gaps if bus else 0, "full_reloads": refresher.full_loads if refresher else 0,
                "reloads": refresher.loads if refresher else 0}

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    log.exception("gateway start-up failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def startup(self) -> None:
        """Open the shared clients, load the first snapshot, start the background tasks."""
        self.state = state = self._build_state()
        self.refresher = SnapshotRefresher(state, self.config.refresh_seconds, self.config.backstop_seconds)
        state.refresh_now = self.refresher.refresh_now
        # The first snapshot brings the install id: the Redis keys are scoped before any request sees it.
        self.refresher.before_install = self._scope_redis
        try:
            self.refresher.install(await load_current(state.db, self.config.default_user_rpm))
            await state.limiter.refresh_floors(state.db)  # budgets survive a Redis that lost them (docs/limits.md)
        except Exception as error:
            if not database_unavailable(error):
                raise
            # Up anyway: requests get 503 service_unavailable (not refused connections) until the
            # refresher loads the first snapshot, and the usage writer replays what was spooled;
            # the limits' upkeep task loads the budget floors once the database is back.
            log.error("database unavailable at start-up (%s); answering 503 until it returns", type(error).__name__)
        self._inference = InferenceHandler(state)
        self._tasks = [asyncio.create_task(self.refresher.run(), name="gateway-snapshot-refresher"),
                       asyncio.create_task(state.recorder.run(), name="gateway-usage-writer"),
                       asyncio.create_task(state.limiter.maintain(state.db), name="gateway-limits-upkeep"),
                       asyncio.create_task(state.demand.run(), name="gateway-demand-signal"),
                       asyncio.create_task(state.queues.run(), name="gateway-fair-queue-tick")]
        if self.config.change_bus and self.config.redis_url:
            self._tasks.append(asyncio.create_task(self._change_bus(), name="gateway-change-bus"))
        if self.config.redis_url:
            self._tasks.append(asyncio.create_task(state.supersede.run(), name="gateway-supersede-channel"))
        if self.metrics.multiprocess_dir:
            self._tasks.append(asyncio.create_task(self._refresh_gauges(), name="gateway-metrics-gauges"))
        # What start-up built (Django, settings, the snapshot) lives as long as the process: the
        # cyclic collector need not walk it again on every full collection while requests run.
        # And it runs when 20,000 more objects live than before (not 700): requests free what they
        # allocate by reference counting, so at the default the collector ran every few hundred
        # requests only to scan in-flight state.
        gc.freeze()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])

    async def _change_bus(self) -> None:
        """Subscribe once this install's id is known (it needs the database: retried until it answers)."""
        while True:
            try:
                ours = await self.state.db.run(_install_id)
                break
            except Exception as error:  # noqa: BLE001 — the database away at start: try again shortly
                log.info("change bus waits for the database (%s)", type(error).__name__)
                await asyncio.sleep(1.0)
        self.bus = ChangeBus(self.state, self.refresher, self.config.redis_url, ours)
        await self.bus.run()

    def _scope_redis(self, snapshot: Snapshot) -> None:
        """From the first snapshot on, every key of the limits and of the cache starts with this
        install's prefix (until then admission answers 503: nothing is counted unscoped)."""
        state, scope = self.state, self.config.redis_scope or snapshot.install_id
        if scope and state.dedup.prefix is None:
            state.limiter.scope(redis_keys.part_prefix(scope, redis_keys.LIMITS))
            state.dedup.prefix = redis_keys.part_prefix(scope, redis_keys.DEDUP)
            state.demand.prefix = redis_keys.part_prefix(scope, redis_keys.DEMAND)
            state.queues.scope(scope)
            state.supersede.prefix = redis_keys.part_prefix(scope, redis_keys.SUPERSEDE)

    def _build_state(self) -> GatewayState:
        config = self.config
        timeouts = Timeouts(config.connect_timeout, config.first_byte_timeout, config.idle_timeout)
        # No client-side connection cap: engines and the limits decide concurrency.
        upstream = UpstreamClient(connect_timeout=config.connect_timeout)
        # The request path's Redis (limits, de-duplication): one pipelined connection
        # (gateway.clients.pipelined_redis). Its keys are scoped once the install id is known.
        redis = PipelinedRedis.from_url(config.redis_url) if config.redis_url else None
        db = DatabaseThreads()
        warmer = PrefixWarmer(upstream, per_engine=config.prefix_warmup, timeout=config.prefix_warmup_timeout,
                              counter=self.metrics.prefix_warmups)
        balancer = Balancer(self.metrics, eject_after=config.eject_after_failures,
                            memory=warmer.memory if warmer.enabled else None)
        return GatewayState(
            config=config, metrics=self.metrics,
            keys=KeyCache(lambda key_hash: db.request(load_key, key_hash),
                          size=config.key_cache_size, negative_ttl=config.negative_key_ttl),
            balancer=balancer,
            limiter=Limiter(redis, self.metrics),
            recorder=self._recorder(db),
            upstream=upstream, timeouts=timeouts, redis=redis, db=db,
            queues=PoolQueues(config, self.metrics, balancer, redis=redis),
            dedup=DedupCache(redis, ttl_seconds=config.dedup_ttl_seconds, prefix=None), demand=DemandSignal(redis),
            supersede=Superseder(redis, config.redis_url, self.metrics), warmer=warmer)

    def _recorder(self, db: DatabaseThreads) -> UsageRecorder:
        config = self.config
        spool = (UsageSpool(config.usage_spool_dir, config.usage_spool_max_bytes)
                 if config.usage_spool_max_bytes else None)
        dead_letter = DeadLetter(Path(config.usage_spool_dir) / DEAD_LETTER_NAME, config.usage_spool_max_bytes)
        return UsageRecorder(self._usage_writer, run_in_thread=db.run, flush_seconds=config.usage_flush_seconds,
                             batch_size=config.usage_batch, spool=spool, dead_letter=dead_letter, metrics=self.metrics)

    async def shutdown(self) -> None:
        """Stop the tasks, write every buffered usage event, close the clients."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.state is None:
            return
        self.state.queues.close()
        if self.state.warmer is not None:
            await self.state.warmer.close()
        await self.state.recorder.flush()
        self.state.recorder.close()
        await self.state.upstream.close()
        if self.state.redis is not None:
            await self.state.redis.aclose()
        await self.state.db.close()


def _install_id() -> str:
    """This database's install id (fleet/install.py), in a database thread."""
    from fleet.install import install_id

    return install_id()


def build_app(**overrides) -> GatewayApp:
    """The gateway configured from Django settings (call after `django.setup()`)."""
    return GatewayApp(GatewayConfig.from_settings(**overrides))
