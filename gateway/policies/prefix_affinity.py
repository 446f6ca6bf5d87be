"""Prefix affinity: requests sharing a prompt prefix go to the engine that has it cached.

Consistent hashing (weighted virtual nodes) maps the prefix or affinity key to an endpoint;
bounded load (Mirrokni et al., "Consistent Hashing with Bounded Loads") spills a request to
the next endpoint on the ring when the owner carries more than `balance` × its fair share.
"""
from __future__ import annotations

import math
import random
from collections import OrderedDict
from typing import Callable, Sequence

from gateway.policies.base import Endpoint, PolicyName, RouteRequest, RoutingPolicy, eligible
from gateway.policies.hash_ring import HashRing
from gateway.policies.least_outstanding import least_loaded

RING_CACHE_SIZE = 16  # distinct pool shapes kept; a policy instance serves one or a few pools


def load_bound(endpoint: Endpoint, candidates: Sequence[Endpoint], balance: float) -> int:
    """Most in-flight requests endpoint may hold: ceil(balance × weighted mean) + 1."""
    total = sum(e.outstanding for e in candidates)
    share = endpoint.weight / sum(e.weight for e in candidates)
    return math.ceil(balance * total * share) + 1


class PrefixAffinity(RoutingPolicy):
    """Same key → same endpoint, unless that endpoint is over its load bound."""

    name = PolicyName.PREFIX_AFFINITY

    def __init__(self, balance: float = 1.25, vnodes: int = 160,
                 rng: random.Random | None = None, observer: Callable[[bool], None] | None = None) -> None:
        self._balance = balance
        self._vnodes = vnodes
        self._rng = rng or random.Random()
        self._rings: OrderedDict[tuple, HashRing] = OrderedDict()
        # Told, per keyed request, whether it landed on its key's home endpoint (a hit-ratio metric).
        self._observe = observer or (lambda home: None)

    def choose(self, endpoints: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        candidates = eligible(endpoints)
        key = request.affinity_key or request.prefix_key
        if key is None:
            return least_loaded(candidates, self._rng)
        by_id = {e.id: e for e in candidates}
        # Tenants are hashed in: their prefix caches are salted apart anyway, and a common
        # system prompt must not put every tenant on one engine.
        for place, endpoint_id in enumerate(self._ring(endpoints).walk(f"{request.tenant_id}\x00{key}")):
            endpoint = by_id.get(endpoint_id)
            if endpoint and endpoint.outstanding + 1 <= load_bound(endpoint, candidates, self._balance):
                self._observe(place == 0)  # the home endpoint may be ejected: that is a spill too
                return endpoint
        self._observe(False)
        return least_loaded(candidates, self._rng)  # unreachable in theory; kept as a floor

    def _ring(self, endpoints: Sequence[Endpoint]) -> HashRing:
        # The ring holds every weighted endpoint, healthy or not: an ejected engine's keys
        # move to its ring successors and come back when it returns; nothing else moves.
        shape = tuple(sorted((e.id, e.weight) for e in endpoints if e.weight > 0))
        ring = self._rings.get(shape)
        if ring is None:
            ring = self._rings[shape] = HashRing(shape, self._vnodes)
            if len(self._rings) > RING_CACHE_SIZE:
                self._rings.popitem(last=False)
        self._rings.move_to_end(shape)
        return ring
