"""Session affinity: an editor / agent session's requests stay on one engine, over any routing policy.

A chat or agent session re-sends its growing context on every turn; on the engine that served
the last turn that context is in the prefix cache, anywhere else it is prefilled again. So a
request carrying a session (`x-switchyard-session`) goes to the engine its session is pinned to
while that engine is eligible (healthy, not ejected, weighted, of the version a rollout chose) and
within the bounded-load limit on requests in flight (the same bound as prefix affinity's,
`balance × fair share`, at least one over). Otherwise — a new session, its engine gone, ejected or
over the bound — the pool's own policy places it (the busy engine marked out for this choice, so
the session really moves), and the session is pinned to the new engine from then on.

Pins are per gateway process, per pool, bounded (least recently used dropped first). Which engine
a new session starts on is the pool's policy's choice, so with `prefix_affinity` every gateway
process starts a session's conversation (same system prompt and first message) on the same engine.
"""
from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Callable, Sequence

from gateway.routing.policies.base import Endpoint, NoEligibleEndpoint, RouteRequest, RoutingPolicy, eligible
from gateway.routing.policies.prefix_affinity import DEFAULT_BALANCE, INFLIGHT_HEADROOM, load_bound

DEFAULT_MAX_SESSIONS = 50_000  # per pool: about 10 MB at most
KEPT, PLACED, MOVED = "kept", "placed", "moved"


def within_bound(endpoint: Endpoint, candidates: Sequence[Endpoint], balance: float) -> bool:
    """Would `endpoint` stay within its bounded-load share of the requests in flight, counting this one?"""
    total = sum(e.outstanding for e in candidates)
    weights = sum(e.weight for e in candidates)
    fair = (total + 1) * endpoint.weight / weights
    return endpoint.outstanding + 1 <= load_bound(fair, balance, INFLIGHT_HEADROOM)


class SessionPins:
    """Which engine each (tenant, session) is on; `choose` keeps it there or moves it."""

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS, balance: float = DEFAULT_BALANCE,
                 observer: Callable[[str], None] | None = None) -> None:
        if balance < 1:
            raise ValueError(f"balance must be at least 1, got {balance}")
        self._pins: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._max = max_sessions
        self._balance = balance
        self._observe = observer or (lambda result: None)

    def __len__(self) -> int:
        return len(self._pins)

    def pinned(self, tenant_id: str, session: str) -> str | None:
        return self._pins.get((tenant_id, session))

    def choose(self, policy: RoutingPolicy, endpoints: Sequence[Endpoint], request: RouteRequest) -> Endpoint:
        """The session's engine if it can take the request, else the policy's pick (then pinned)."""
        if request.session is None:
            return policy.choose(endpoints, request)
        key = (request.tenant_id, request.session)
        pinned_id = self._pins.get(key)
        pinned = next((e for e in endpoints if e.id == pinned_id), None) if pinned_id is not None else None
        if pinned is not None and pinned.eligible:
            if within_bound(pinned, eligible(endpoints), self._balance):
                self._pins.move_to_end(key)
                self._observe(KEPT)
                return pinned
            chosen = self._elsewhere(policy, endpoints, request, pinned)
        else:
            chosen = policy.choose(endpoints, request)
        self._observe(PLACED if pinned_id is None else MOVED if chosen.id != pinned_id else KEPT)
        self._pin(key, chosen.id)
        return chosen

    @staticmethod
    def _elsewhere(policy: RoutingPolicy, endpoints: Sequence[Endpoint], request: RouteRequest,
                   busy: Endpoint) -> Endpoint:
        """The policy's pick with the over-loaded engine out of it (it stays if it is the only one)."""
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
