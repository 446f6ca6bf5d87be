"""Prefix affinity: requests sharing a prompt prefix go to the engine that has it cached.

Consistent hashing (weighted virtual nodes) maps the prefix or affinity key to an endpoint;
bounded load (Mirrokni, Thorup, Zadimoghaddam, "Consistent Hashing with Bounded Loads") sends a
request past its home endpoint to the next one on the ring when the home endpoint is over
`balance` × its fair share, counted two ways: requests in flight now, and requests assigned over
the last `window` placements. The first bounds queueing; the second bounds each engine's share
of the traffic, which in-flight counts alone cannot do when engines hold only a request or two.
"""
from __future__ import annotations

import math
import random
from typing import Callable, Sequence

from gateway.routing.policies.base import Endpoint, PolicyName, RouteRequest, RoutingPolicy, eligible
from gateway.routing.policies.hash_ring import HashRing, RingCache
from gateway.routing.policies.least_outstanding import least_loaded
from gateway.routing.policies.window import RecentAssignments

DEFAULT_BALANCE = 1.25
DEFAULT_VNODES = 160  # virtual nodes per endpoint of weight 1
DEFAULT_WINDOW = 256  # placements remembered for the share bound
INFLIGHT_HEADROOM = 1  # an endpoint may always hold one request over its fair in-flight share
SHARE_HEADROOM = 4  # … and take about one burst over its fair share of recent placements
_EPS = 1e-9  # float slack, so that 1.25 × 4.0 computed as 5.000…1 still rounds to 5


def load_bound(fair: float, balance: float, headroom: int = 0) -> int:
    """Most requests an endpoint whose fair share is `fair` may hold, counting the new one.

    ceil(balance × fair), but at least ceil(fair) + headroom. With the new request counted in
    `fair` (as in Mirrokni et al.) some endpoint is always within its bound, so no +1 is needed
    for the bound to be satisfiable. The headroom matters only while fair shares are small: at
    one or two requests in flight per engine, 25 % over the mean is less than one request, and
    while the window of recent placements fills (after a restart) a key's first burst should
    still land on one engine.
    """
    return max(math.ceil(balance * fair - _EPS), math.ceil(fair - _EPS) + headroom)


def ring_key(tenant_id: str, key: str) -> str:
    """Where a tenant's key sits on the ring (gateway.routing.prefix_warmup finds a key's home with it too)."""
    return f"{tenant_id}\x00{key}"


class PrefixAffinity(RoutingPolicy):
    """Same key → same endpoint, unless that endpoint is over one of its load bounds."""

    name = PolicyName.PREFIX_AFFINITY

    def __init__(self, balance: float = DEFAULT_BALANCE, vnodes: int = DEFAULT_VNODES,
                 window: int | None = DEFAULT_WINDOW, rng: random.Random | None = None,
                 observer: Callable[[bool], None] | None = None) -> None:
        if balance < 1:
            raise ValueError(f"balance must be at least 1, got {balance}")
        self._balance = balance
        # None or 0 turns the share bound off (in-flight bound only, as before).
        self._recent = RecentAssignments(window) if window else None
        self._rng = rng or random.Random()
        self._rings = RingCache(vnodes)
        self._ring: HashRing | None = None  # the ring of the last request: a new one may have new members
        # Told, per keyed request, whether it landed on its key's home endpoint (a hit-ratio metric).
        self._observe = observer or (lambda home: None)

    def choose(self, endpoints: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        candidates = eligible(endpoints)
        key = request.affinity_key or request.prefix_key
        if key is None:
            return self._record(least_loaded(candidates, self._rng))
        ring = self._rings.ring(endpoints)
        if ring is not self._ring:
            self._ring_changed(ring)
        if ring.size == 1:  # one engine: it is every key's home (nothing to hash or bound)
            self._observe(True)
            return self._record(candidates[0])
        by_id = {e.id: e for e in candidates}
        within_inflight = self._inflight_check(candidates)
        within_share = self._share_check(candidates)
        # Tenants are hashed in: their prefix caches are salted apart anyway, and a common
        # system prompt must not put every tenant on one engine.
        first_within_inflight = None
        for place, endpoint_id in enumerate(ring.walk(ring_key(request.tenant_id, key))):
            endpoint = by_id.get(endpoint_id)
            if endpoint is None or not within_inflight(endpoint):
                continue
            if within_share(endpoint):
                self._observe(place == 0)  # the home endpoint may be ejected: that is a spill too
                return self._record(endpoint)
            if first_within_inflight is None:
                first_within_inflight = (place, endpoint)
        # Both bounds can be satisfiable alone yet not together (an engine with the fewest recent
        # placements may hold long requests): queueing matters more than the share, so the
        # in-flight bound wins.
        place, endpoint = first_within_inflight or (-1, least_loaded(candidates, self._rng))
        self._observe(place == 0)
        return self._record(endpoint)

    def _ring_changed(self, ring: HashRing) -> None:
        """An endpoint joined: the window's shares are a record of a pool that no longer exists, so start it afresh.

        Kept, they would hold the new endpoint at zero and the old ones near the whole window, and the share bound
        would push the old endpoints' keys — the ones they hold cached — onto the new, cold engines for a window's
        worth of placements (at the first step of a stand-up spike: nearly all of it, docs/benchmarks.md). Afresh,
        every member starts from the same count and the headroom lets each key's first burst land home."""
        previous, self._ring = self._ring, ring
        if self._recent is not None and previous is not None and not ring.members <= previous.members:
            self._recent.clear()

    def _inflight_check(self, candidates: Sequence[Endpoint]) -> Callable[[Endpoint], bool]:
        total, weights = 0, 0.0
        for e in candidates:
            total += e.outstanding
            weights += e.weight
        balance = self._balance
        return lambda e: e.outstanding + 1 <= load_bound((total + 1) * e.weight / weights, balance, INFLIGHT_HEADROOM)

    def _share_check(self, candidates: Sequence[Endpoint]) -> Callable[[Endpoint], bool]:
        recent = self._recent
        if recent is None:
            return lambda e: True
        # Only the candidates' placements count: an ejected engine's past share is not a load now.
        count, total, weights, balance = recent.count, 0, 0.0, self._balance
        for e in candidates:
            total += count(e.id)
            weights += e.weight
        return lambda e: count(e.id) + 1 <= load_bound((total + 1) * e.weight / weights, balance, SHARE_HEADROOM)

    def _record(self, endpoint: Endpoint) -> Endpoint:
        if self._recent is not None:
            self._recent.add(endpoint.id)
        return endpoint
