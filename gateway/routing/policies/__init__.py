"""Routing policies, chosen by name; see docs/routing.md."""
from __future__ import annotations

from typing import Any

from gateway.routing.policies.base import (
    Endpoint,
    NoEligibleEndpoint,
    PolicyName,
    RouteRequest,
    RoutingPolicy,
)
from gateway.routing.policies.keys import AFFINITY_HEADER, prefix_key
from gateway.routing.policies.latency_ewma import LatencyEwma
from gateway.routing.policies.least_outstanding import LeastOutstanding
from gateway.routing.policies.prefix_affinity import PrefixAffinity
from gateway.routing.policies.round_robin import RoundRobin

POLICIES: dict[PolicyName, type[RoutingPolicy]] = {
    PolicyName.ROUND_ROBIN: RoundRobin,
    PolicyName.LEAST_OUTSTANDING: LeastOutstanding,
    PolicyName.LATENCY_EWMA: LatencyEwma,
    PolicyName.PREFIX_AFFINITY: PrefixAffinity,
}


def get_policy(name: str, **options: Any) -> RoutingPolicy:
    """A new policy instance by name (one per pool: policies keep small per-pool state)."""
    if name not in PolicyName.__members__.values():
        raise ValueError(f"unknown routing policy {name!r}; one of {[p.value for p in PolicyName]}")
    return POLICIES[PolicyName(name)](**options)


__all__ = [
    "AFFINITY_HEADER", "Endpoint", "NoEligibleEndpoint", "PolicyName", "RouteRequest",
    "RoutingPolicy", "get_policy", "prefix_key",
]
