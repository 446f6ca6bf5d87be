"""Which engine gets a request: routable candidates, the pool's policy, in-flight counts, ejection.

The routing decision itself belongs to `gateway.routing.policies` (pure functions of their inputs);
this module owns the gateway's live state around it: how many requests each engine has in
flight, which engines failed too often in a row and are out of rotation until a probe of
their /health succeeds again.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass

from gateway.config.snapshot import Pool, Upstream
from gateway.routing.policies.latency_ewma import ewma
from gateway.routing.policy_chooser import PolicyChooser

log = logging.getLogger("gateway.balancer")


@dataclass(slots=True)
class RouteHints:
    """What the policy may use besides the candidates: the body and the caller's hints (built per
    request, so not frozen — see gateway.routing.policies.base.Endpoint; treat it as read-only)."""

    body: dict
    kind: str  # "completions" or "chat"
    model: str
    affinity: str | None = None
    tenant_id: int | None = None
    version: tuple[int, int] | None = None  # (deployment, model version) a rollout's weights chose
    session: str | None = None  # x-switchyard-session: session affinity, and the fair queue's flow
    cache_salt: str | None = None  # the tenant's, for the prefix warm-up of engines it shares (prefix_warmup.py)


class Balancer:
    """Live per-engine state shared by all requests of one gateway process."""

    def __init__(self, metrics, *, eject_after: int, memory=None):
        self._metrics = metrics
        self._eject_after = eject_after
        self._chooser = PolicyChooser(metrics.observe_placement, metrics.observe_session, memory)
        self.outstanding: dict[int, int] = {}
        # What each engine itself reported at its last health probe (running + waiting requests),
        # from every gateway's traffic: the change bus's signals channel replaces it whole.
        self.engine_load: dict[int, float] = {}
        self.ttft: dict[int, float] = {}
        self._failures: dict[int, int] = {}
        self.ejected: dict[int, Upstream] = {}

    def choose(self, pools: tuple[Pool, ...], hints: RouteHints, exclude: set[int]) -> Upstream | None:
        """An engine for this request, or None when no healthy one is left."""
        unusable = exclude | set(self.ejected) if self.ejected else exclude
        return self._chooser.choose(pools, hints, self.outstanding, self.ttft, unusable, self.engine_load)

    def observe_ttft(self, upstream: Upstream, seconds: float) -> None:
        """Feed the latency EWMA policy (first byte after the request went out)."""
        self.ttft[upstream.instance_id] = ewma(self.ttft.get(upstream.instance_id), seconds)

    def acquire(self, upstream: Upstream) -> None:
        instance_id = upstream.instance_id
        count = self.outstanding.get(instance_id)
        if count is None:  # first request to this engine: its gauge reads the count when scraped
            count = 0
            self._metrics.track_outstanding(instance_id, functools.partial(self._outstanding_of, instance_id))
        self.outstanding[instance_id] = count + 1

    def release(self, upstream: Upstream) -> None:
        instance_id = upstream.instance_id
        self.outstanding[instance_id] = max(0, self.outstanding.get(instance_id, 0) - 1)

    def _outstanding_of(self, instance_id: int) -> int:
        return self.outstanding.get(instance_id, 0)

    def succeeded(self, upstream: Upstream) -> None:
        self._failures.pop(upstream.instance_id, None)

    def failed(self, upstream: Upstream, kind: str) -> None:
        """Count a failure; the Nth in a row takes the engine out of rotation."""
        self._metrics.upstream_errors.labels(str(upstream.instance_id), kind).inc()
        failures = self._failures.get(upstream.instance_id, 0) + 1
        self._failures[upstream.instance_id] = failures
        if failures >= self._eject_after and upstream.instance_id not in self.ejected:
            log.warning("ejecting instance %s after %d failures in a row", upstream.instance_id, failures)
            self.ejected[upstream.instance_id] = upstream
            self._metrics.ejections.labels(str(upstream.instance_id)).inc()

    def readmit(self, instance_id: int) -> None:
        self.ejected.pop(instance_id, None)
        self._failures.pop(instance_id, None)

    def forget_missing(self, live_ids: set[int]) -> None:
        """Drop state for engines the snapshot no longer lists (stopped, failed, replaced)."""
        for table in (self.ejected, self._failures, self.ttft):
            for instance_id in [i for i in table if i not in live_ids]:
                del table[instance_id]
        for instance_id in [i for i, n in self.outstanding.items() if n == 0 and i not in live_ids]:
            del self.outstanding[instance_id]
            self._metrics.forget_outstanding(instance_id)

    async def probe_ejected(self, client, timeout: float) -> None:
        """Readmit every ejected engine whose /health answers 200."""
        for upstream in list(self.ejected.values()):
            if await _healthy(client, upstream.url, timeout):
                log.info("readmitting instance %s: /health answered", upstream.instance_id)
                self.readmit(upstream.instance_id)


async def _healthy(client, url: str, timeout: float) -> bool:
    from gateway.clients.engine import UpstreamError

    try:
        async with asyncio.timeout(timeout):
            response = await client.get(url + "/health")
            try:
                await response.read()
            finally:
                response.close()
            return response.status == 200
    except (UpstreamError, OSError, TimeoutError):
        return False
