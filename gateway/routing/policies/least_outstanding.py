"""Least outstanding requests per unit of weight; ties broken at random."""
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


def least_loaded(candidates: Sequence[Endpoint], rng: random.Random) -> Endpoint:
    """The endpoint with the fewest in-flight requests per weight (random among equals)."""
    best = min(load(e) for e in candidates)
    # A fixed tie-break (first in the list) would pile every idle-pool request on one engine.
    return rng.choice([e for e in candidates if load(e) == best])


class LeastOutstanding(RoutingPolicy):
    """Sends each request where the fewest requests (per weight) are already in flight."""

    name = PolicyName.LEAST_OUTSTANDING

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def choose(self, endpoints: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        return least_loaded(eligible(endpoints), self._rng)
