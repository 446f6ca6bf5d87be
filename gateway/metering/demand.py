"""This gateway process's demand signal, per deployment: requests in flight at its engines, and of those the
streamed ones still waiting for their first token — published for the autoscaler.

On the request path only `enter` / `leave` run: a few dict updates each. A background task, every
TICK_SECONDS, counts per deployment the in-flight requests without a first token yet (off the request
path: the records say it) and publishes the figures that changed since the last publish (refreshing
non-zero ones every REFRESH_SECONDS, so that they stay fresh): one Redis script per such deployment
(controlplane/demand_signal.py). Nothing is sent while nothing changes. When the script says the
install's waiting sum reached the deployment's nudge level, the gateway asks the fleet for a decision
now (`fleet.autoscale_now`), from a thread, as the wake path asks `fleet.wake`.

A streamed request without its first token is queued at the engine or in its prefill: the gateways'
count of them is the engines' queue as it is now, where the engines' own figure is a health probe
old. A request answered whole has its first byte only at the end, so it counts in flight only.

Requests waiting in the gateway's own pool queue (beyond `queue_inflight_per_instance` per engine) are
not counted: by then the count per engine is far above any scaling threshold.
"""
from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time

from controlplane import redis_keys
from controlplane.demand_signal import FRESH_MS, NUDGE_MS, PUBLISH
from gateway.metering.recorder import RequestRecord

log = logging.getLogger("gateway.demand")
TICK_SECONDS = 0.2
REFRESH_SECONDS = 2.0
NUDGE_EXPIRES_SECONDS = 5.0  # an ask the worker could not take up by then is stale: the beat pass has decided since


class DemandSignal:
    """Per deployment: this process's requests in flight at its engines, and what was last published."""

    def __init__(self, redis, send=None):
        self._redis = redis
        self._send = send or _send_nudge
        self.flight: dict[int, dict[int, RequestRecord]] = {}  # deployment -> {id(record): record}
        self._published: dict[int, tuple[int, int, float]] = {}  # deployment -> (held, waiting, monotonic time)
        self.prefix: str | None = None  # `sy:<install id>:demand`, once the install id is known
        self.field = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.nudges = 0

    def enter(self, deployment_id: int, record: RequestRecord) -> None:
        """`record` (a RequestRecord) went to one of the deployment's engines."""
        found = self.flight.get(deployment_id)
        if found is None:
            found = self.flight[deployment_id] = {}
        found[id(record)] = record

    def leave(self, deployment_id: int, record: RequestRecord) -> None:
        found = self.flight.get(deployment_id)
        if found is not None:
            found.pop(id(record), None)

    def figures(self, deployment_id: int) -> tuple[int, int]:
        """(in flight, streamed and still without a first token) for one deployment."""
        records = self.flight.get(deployment_id) or {}
        return len(records), sum(1 for r in records.values() if r.streamed and r.ttft_ms is None)

    def due(self, now: float) -> list[tuple[int, int, int]]:
        """(deployment, held, waiting) to publish: changed since the last publish, or non-zero and due again."""
        found = []
        for deployment_id in self.flight:
            held, waiting = self.figures(deployment_id)
            last = self._published.get(deployment_id)
            if last is None or last[:2] != (held, waiting) or (held and now - last[2] >= REFRESH_SECONDS):
                found.append((deployment_id, held, waiting))
        return found

    async def publish(self) -> None:
        """Publish what is due; ask for a decision where the install's waiting count reached the nudge level."""
        if self._redis is None or self.prefix is None:
            return
        now = time.monotonic()
        for deployment_id, held, waiting in self.due(now):
            keys = redis_keys.demand_names(self.prefix, deployment_id)
            _, _, nudge = await self._redis.execute("EVAL", PUBLISH, 3, *keys, self.field, held, waiting, FRESH_MS,
                                                    NUDGE_MS)
            self._published[deployment_id] = (held, waiting, now)
            if not self.flight.get(deployment_id, True):
                del self.flight[deployment_id]  # published as 0: nothing to refresh until it is used again
            if nudge:
                self.nudges += 1
                asyncio.get_running_loop().run_in_executor(None, self._send, deployment_id)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            try:
                await self.publish()
            except Exception as error:  # noqa: BLE001 — Redis away: the autoscaler reads the engines' figures
                log.info("demand signal not published (%s)", error)
                await asyncio.sleep(REFRESH_SECONDS)


def _send_nudge(deployment_id: int) -> None:
    try:
        from controlplane.celery import app

        app.send_task("fleet.autoscale_now", args=[deployment_id], expires=NUDGE_EXPIRES_SECONDS)
    except Exception as error:  # noqa: BLE001 — the broker away: the beat pass still decides
        log.warning("could not ask the fleet to scale deployment %s now (%s)", deployment_id, error)
