"""The routing-policy interface: pick one endpoint of a pool for one request."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from typing import Sequence


class PolicyName(StrEnum):
    ROUND_ROBIN = "round_robin"
    LEAST_OUTSTANDING = "least_outstanding"
    LATENCY_EWMA = "latency_ewma"
    PREFIX_AFFINITY = "prefix_affinity"


# Endpoint and RouteRequest are built per request, so not frozen (a frozen dataclass sets each
# field through object.__setattr__). Treat them as read-only all the same.
@dataclass(slots=True)
class Endpoint:
    """One routable engine as the gateway sees it at this instant."""

    id: str
    url: str
    weight: float = 1.0  # relative share; 0 = never (e.g. a canary at 0 %)
    outstanding: int = 0  # requests in flight at it: this gateway's, or the engine's own count when higher
    ttft_ewma: float | None = None  # seconds; None until the first response is measured
    healthy: bool = True
    ejected: bool = False  # taken out by outlier detection or draining

    @property
    def eligible(self) -> bool:
        return self.healthy and not self.ejected and self.weight > 0


@dataclass(slots=True)
class RouteRequest:
    """What a policy may know about the request."""

    tenant_id: str
    model: str
    affinity_key: str | None = None  # explicit, e.g. from a repo / file-path header
    prefix_key: str | None = None  # derived from the prompt's leading blocks
    session: str | None = None  # an editor / agent session (x-switchyard-session): see session_affinity.py


class NoEligibleEndpoint(LookupError):
    """Every endpoint is unhealthy, ejected or weighted 0: the caller answers 503."""


def eligible(endpoints: Sequence[Endpoint]) -> list[Endpoint]:
    """The endpoints a policy may choose from; raises when there are none."""
    found = [e for e in endpoints if e.eligible]
    if not found:
        raise NoEligibleEndpoint(f"none of {len(endpoints)} endpoints is eligible")
    return found


def load(endpoint: Endpoint) -> float:
    """In-flight requests per unit of weight, counting the one being placed."""
    return (endpoint.outstanding + 1) / endpoint.weight


class RoutingPolicy(ABC):
    """Chooses an endpoint; never returns one that is not eligible."""

    name: PolicyName

    @abstractmethod
    def choose(self, endpoints: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        """Return one eligible endpoint of endpoints for request."""
