"""This gateway process's demand signal: requests in flight per deployment, published for the autoscaler.

On the request path only `enter` / `leave` run: one dict update each. A background task publishes,
every TICK_SECONDS, the count of each deployment that changed since its last publish (and refreshes
a non-zero count every REFRESH_SECONDS, so that it stays fresh): one Redis script per such deployment
(controlplane/demand_signal.py). Nothing is sent while nothing changes. When the script says the
install's sum reached the deployment's nudge level, the gateway asks the fleet for a decision now
(`fleet.autoscale_now`), from a thread, as the wake path asks `fleet.wake`.

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

log = logging.getLogger("gateway.demand")
TICK_SECONDS = 0.2
REFRESH_SECONDS = 2.0
NUDGE_EXPIRES_SECONDS = 5.0  # an ask the worker could not take up by then is stale: the beat pass has decided since


class DemandSignal:
    """Per deployment: requests this process has in flight at its engines, and what was last published."""

    def __init__(self, redis, send=None):
        self._redis = redis
        self._send = send or _send_nudge
        self.held: dict[int, int] = {}
        self._published: dict[int, tuple[int, float]] = {}  # deployment -> (count, monotonic time)
        self.prefix: str | None = None  # `sy:<install id>:demand`, once the install id is known
        self.field = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.nudges = 0

    def enter(self, deployment_id: int) -> None:
        self.held[deployment_id] = self.held.get(deployment_id, 0) + 1

    def leave(self, deployment_id: int) -> None:
        self.held[deployment_id] = max(0, self.held.get(deployment_id, 0) - 1)

    def due(self, now: float) -> list[tuple[int, int]]:
        """(deployment, count) to publish: changed since the last publish, or non-zero and due for a refresh."""
        found = []
        for deployment_id, count in self.held.items():
            last = self._published.get(deployment_id)
            if last is None or last[0] != count or (count and now - last[1] >= REFRESH_SECONDS):
                found.append((deployment_id, count))
        return found

    async def publish(self) -> None:
        """Publish what is due; ask for a decision where the install's count reached the nudge level."""
        if self._redis is None or self.prefix is None:
            return
        now = time.monotonic()
        for deployment_id, count in self.due(now):
            keys = redis_keys.demand_names(self.prefix, deployment_id)
            total, nudge = await self._redis.execute("EVAL", PUBLISH, 3, *keys, self.field, count, FRESH_MS,
                                                     NUDGE_MS)
            self._published[deployment_id] = (count, now)
            if self.held.get(deployment_id) == 0:
                del self.held[deployment_id]  # published as 0: nothing to refresh until it is used again
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
