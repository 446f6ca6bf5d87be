"""Smooth weighted round-robin (as in nginx): weights honoured, no bursts to one endpoint."""
from __future__ import annotations

from typing import Sequence

from gateway.routing.policies.base import Endpoint, PolicyName, RouteRequest, RoutingPolicy, eligible


class RoundRobin(RoutingPolicy):
    """Each pick adds every weight to its endpoint's credit and takes the richest endpoint."""

    name = PolicyName.ROUND_ROBIN

    def __init__(self) -> None:
        # Keyed by endpoint id and pruned to the endpoints of the last call, so it stays as
        # small as the pool. One event loop calls it; no lock is needed.
        self._credit: dict[str, float] = {}

    def choose(self, endpoints: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        candidates = eligible(endpoints)
        credit = {e.id: self._credit.get(e.id, 0.0) + e.weight for e in candidates}
        chosen = max(candidates, key=lambda e: credit[e.id])
        credit[chosen.id] -= sum(e.weight for e in candidates)
        self._credit = credit
        return chosen
