"""Waking a deployment asleep at zero (docs/autoscaling.md): ask the fleet once, hold the request until an
engine serves it, or give up with a 503 and Retry-After.

The request to the fleet is a Celery task (`fleet.wake`) sent from a thread, at most once per
deployment every RESEND_SECONDS while requests wait; the snapshot shows the woken instance when
the fleet marks it ready (the change bus carries that within a second). Nothing here runs unless
a request found every pool of its model asleep.
"""
from __future__ import annotations

import asyncio
import logging
import time

from gateway import errors

log = logging.getLogger("gateway.wake")
RESEND_SECONDS = 10.0
POLL_SECONDS = 0.05


class Waker:
    """One per gateway process: remembers when each deployment was last asked to wake."""

    def __init__(self, send=None):
        self._send = send or _send_wake
        self._asked: dict[int, float] = {}

    def ask(self, deployment_ids: list[int]) -> None:
        now = time.monotonic()
        due = [d for d in deployment_ids if now - self._asked.get(d, -RESEND_SECONDS) >= RESEND_SECONDS]
        for deployment_id in due:
            self._asked[deployment_id] = now
            asyncio.get_running_loop().run_in_executor(None, self._send, deployment_id)

    async def wait(self, pools, current_pools, model: str) -> tuple[tuple, float]:
        """Ask the sleeping pools to wake and wait for one to serve: (its pools now, milliseconds waited).

        `current_pools()` reads the latest snapshot's pools for the request's tenant and model."""
        asleep = [p for p in pools if p.asleep]
        timeout = max(p.wake_timeout for p in asleep)
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            self.ask([p.deployment_id for p in asleep])
            await asyncio.sleep(POLL_SECONDS)
            found = current_pools()
            if found and any(p.upstreams for p in found):
                return found, (time.monotonic() - began) * 1000
        error = errors.no_capacity(model)
        error.message = f"'{model}' is waking from zero and was not ready within {timeout:.0f} s; try again."
        error.headers = [*error.headers, (b"retry-after", b"30")]
        raise error


def _send_wake(deployment_id: int) -> None:
    try:
        from controlplane.celery import app

        app.send_task("fleet.wake", args=[deployment_id])
    except Exception as error:  # noqa: BLE001 — the broker away: the next waiting request asks again
        log.warning("could not ask the fleet to wake deployment %s (%s)", deployment_id, error)
