"""Session affinity: an editor / agent session's requests stay on one engine, over any routing policy.

A chat or agent session re-sends its growing context on every turn; on the engine that served
the last turn that context is in the prefix cache, anywhere else it is prefilled again. So a
request carrying a session (`x-switchyard-session`) goes to the engine its session is pinned to
while that engine is eligible (healthy, not ejected, weighted, of the version a rollout chose) and
within the bounded-load limit on requests in flight (prefix affinity's bound, `balance × fair
share`, at least one over, with a looser balance: see SESSION_BALANCE).

A new session is pinned to the first eligible engine on a walk of a consistent-hash ring from the
session's own point; load plays no part in it. A session whose engine is gone or ineligible is
pinned the same way to the next eligible engine of its walk and stays there: it does not flap back
when the old one returns, since its context is cached on the new one now. A session whose engine
is over the bound spills: this one request goes to the next engine of its walk within the bound
(the pool's own policy chooses if none is), and the pin stays.

Pins are per gateway process, per pool, bounded (least recently used dropped first), and not
shared: the ring walk is a function of the session and the pool's engines alone, so every gateway
process (`--workers N`, several hosts behind a load balancer) pins a session to the same engine and
moves it to the same next one when that engine fails. What each process judges on its own — the
bound, by the requests in flight it sees — decides single spills only, never where a session is
pinned, so the processes' pins do not drift apart under load.
"""
from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Callable, Iterator, Sequence

from gateway.routing.policies.base import Endpoint, NoEligibleEndpoint, RouteRequest, RoutingPolicy, eligible
from gateway.routing.policies.hash_ring import RingCache
from gateway.routing.policies.prefix_affinity import INFLIGHT_HEADROOM, load_bound

DEFAULT_MAX_SESSIONS = 50_000  # per pool: about 10 MB at most
# Looser than prefix affinity's 1.25: a spilled session request prefills its whole context elsewhere,
# while a busier engine only batches one more sequence. Measured on three simulators with 30 sessions
# of 6 turns (tests/gateway_app/test_session_affinity_prefix_cache.py; a hash spreads 30 sessions
# unevenly over 3 engines): at 1.25, 9-32 of the 180 session requests spilled (eleven runs), at 1.5
# 6-34 (five), at 1.75 0-8 (nine). Not 2 or more: with two engines such a bound could never be hit.
SESSION_BALANCE = 1.75
KEPT, PLACED, MOVED, SPILLED = "kept", "placed", "moved", "spilled"


def within_bound(endpoint: Endpoint, candidates: Sequence[Endpoint], balance: float) -> bool:
    """Would `endpoint` stay within its bounded-load share of the requests in flight, counting this one?"""
    total = sum(e.outstanding for e in candidates)
    weights = sum(e.weight for e in candidates)
    fair = (total + 1) * endpoint.weight / weights
    return endpoint.outstanding + 1 <= load_bound(fair, balance, INFLIGHT_HEADROOM)


class SessionPins:
    """Which engine each (tenant, session) is on; `choose` keeps it there or moves it."""

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS, balance: float = SESSION_BALANCE,
                 observer: Callable[[str], None] | None = None) -> None:
        if balance < 1:
            raise ValueError(f"balance must be at least 1, got {balance}")
        self._pins: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._max = max_sessions
        self._balance = balance
        self._rings = RingCache()
        self._observe = observer or (lambda result: None)

    def __len__(self) -> int:
        return len(self._pins)

    def pinned(self, tenant_id: str, session: str) -> str | None:
        return self._pins.get((tenant_id, session))

    def choose(self, policy: RoutingPolicy, endpoints: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        """The session's engine if it can take the request, else the next one within the bound."""
        if request.session is None:
            return policy.choose(endpoints, request)
        candidates = eligible(endpoints)
        pinned, result, walk = self._pinned(endpoints, candidates, request)
        chosen = pinned if within_bound(pinned, candidates, self._balance) else self._spill(
            policy, endpoints, candidates, request, walk or self._walk(endpoints, request), pinned)
        self._observe(result)
        if chosen is not pinned:
            self._observe(SPILLED)  # besides: kept, placed and moved count every request once
        return chosen

    def _pinned(self, endpoints: Sequence[Endpoint], candidates: Sequence[Endpoint],
                request: RouteRequest) -> tuple[Endpoint, str, Iterator[str] | None]:
        """The session's engine; whether it was kept, placed or moved; the rest of its walk if walked."""
        key = (request.tenant_id, str(request.session))
        pinned_id = self._pins.get(key)
        pinned = next((e for e in candidates if e.id == pinned_id), None) if pinned_id is not None else None
        if pinned is not None:
            self._pins.move_to_end(key)
            return pinned, KEPT, None
        # New, or its engine is gone or ineligible: the first eligible engine of its walk. The rest of
        # the walk (the engines before it are not eligible) is where a spill looks next.
        walk = self._walk(endpoints, request)
        by_id = {e.id: e for e in candidates}
        pinned = by_id[next(i for i in walk if i in by_id)]
        self._pin(key, pinned.id)
        return pinned, PLACED if pinned_id is None else MOVED, walk

    def _walk(self, endpoints: Sequence[Endpoint], request: RouteRequest) -> Iterator[str]:
        """The pool's engine ids in the session's order (the same in every gateway process)."""
        return self._rings.ring(endpoints).walk(f"{request.tenant_id}\x00{request.session}")

    def _spill(self, policy: RoutingPolicy, endpoints: Sequence[Endpoint], candidates: Sequence[Endpoint],
               request: RouteRequest, walk: Iterator[str], busy: Endpoint) -> Endpoint:
        """For one request: the next engine of the session's walk within the bound; else the policy's pick
        with `busy` marked out (`busy` itself if it is the only eligible one)."""
        by_id = {e.id: e for e in candidates if e is not busy}
        for endpoint_id in walk:
            endpoint = by_id.get(endpoint_id)
            if endpoint is not None and within_bound(endpoint, candidates, self._balance):
                return endpoint
        others = [dataclasses.replace(e, ejected=True) if e is busy else e for e in endpoints]
        try:
            return policy.choose(others, request)
        except NoEligibleEndpoint:
            return busy

    def _pin(self, key: tuple[str, str], endpoint_id: str) -> None:
        self._pins[key] = endpoint_id
        self._pins.move_to_end(key)
        if len(self._pins) > self._max:
            self._pins.popitem(last=False)
