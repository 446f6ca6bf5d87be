"""Lowest expected wait: TTFT EWMA × (in flight + 1) / weight, exploring cold endpoints first."""
from __future__ import annotations

import random
from typing import Sequence

from gateway.routing.policies.base import (
    Endpoint,
    PolicyName,
    RouteRequest,
    RoutingPolicy,
    eligible,
    load,
)
from gateway.routing.policies.least_outstanding import least_loaded


def ewma(previous: float | None, sample: float, alpha: float = 0.3) -> float:
    """The gateway's update rule when a first token arrives: recent samples weigh alpha."""
    return sample if previous is None else alpha * sample + (1 - alpha) * previous


class LatencyEwma(RoutingPolicy):
    """Picks the endpoint expected to answer first; still probes cold and slow ones."""

    name = PolicyName.LATENCY_EWMA

    def __init__(self, explore: float = 0.02, cold_probes: int = 1,
                 rng: random.Random | None = None) -> None:
        self._explore = explore  # share of picks spread by weight, so a slow EWMA can recover
        self._cold_probes = cold_probes  # in-flight requests allowed on a not-yet-measured engine
        self._rng = rng or random.Random()

    def choose(self, endpoints: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        candidates = eligible(endpoints)
        cold = [e for e in candidates if e.ttft_ewma is None and e.outstanding < self._cold_probes]
        if cold:
            return least_loaded(cold, self._rng)
        if self._rng.random() < self._explore:
            return self._rng.choices(candidates, weights=[e.weight for e in candidates])[0]
        measured = [e for e in candidates if e.ttft_ewma is not None] or candidates
        return min(measured, key=lambda e: ((e.ttft_ewma or 0.0) * load(e), load(e)))
