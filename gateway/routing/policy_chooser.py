"""The seam between the gateway's live state and the pure routing policies in `gateway.routing.policies`."""
from __future__ import annotations

import logging

from gateway.config.snapshot import DEFAULT_POLICY, Pool, Upstream
from gateway.routing.policies import Endpoint, NoEligibleEndpoint, PolicyName, RouteRequest, get_policy, prefix_key
from gateway.routing.policies.session_affinity import SessionPins

log = logging.getLogger("gateway.routing")
KINDS = {"chat": "chat", "completions": "completion"}
MAX_CACHED_POOLS = 256


class PolicyChooser:
    """One policy instance per set of pools (policies keep small per-pool state, like rings)."""

    def __init__(self, observe_placement=None, observe_session=None, memory=None):
        self._policies: dict[tuple, object] = {}
        self._pins: dict[tuple, SessionPins] = {}  # per pool shape, like the policies
        self._observe_placement = observe_placement
        self._observe_session = observe_session
        self._memory = memory  # gateway.routing.prefix_warmup.PrefixMemory: the heads of the keys routed
        # Per pools tuple, by identity (a snapshot keeps its tuples, so the same object comes back
        # on every request): (the pools, their engines by endpoint id, the policy). The entry holds
        # the tuple, so its id cannot be reused while it is cached.
        self._by_pools: dict[int, tuple] = {}

    def choose(self, pools: tuple[Pool, ...], hints, outstanding: dict, ttft: dict, unusable,
               engine_load: dict | None = None) -> Upstream | None:
        """The policy's pick among the pools' engines; None when none is eligible.

        This gateway's view per instance id: `outstanding` requests, `ttft` EWMA, and the
        `unusable` ids (ejected or already tried for this request). Unusable engines stay in the
        list, marked ejected, so a hash ring keeps its shape and only their keys move.
        An engine's load is this gateway's in-flight count, or what the engine last reported
        (`engine_load`: running + waiting, other gateways' requests included) when that is more,
        so least-loaded and bounded-load choices see the engine's queue, not only our share of it.
        """
        entry = self._by_pools.get(id(pools))
        if entry is None:
            if len(self._by_pools) >= MAX_CACHED_POOLS:  # old snapshots' tuples: let them go
                self._by_pools.clear()
            policy, pins = self._policy(pools)
            entry = self._by_pools[id(pools)] = (
                pools, {str(u.instance_id): u for pool in pools for u in pool.upstreams}, policy, pins,
                tuple(p.deployment_id for p in pools))
        _, upstreams, policy, pins, shape = entry
        if hints.session is not None:  # session affinity over the pool's policy (policies/session_affinity.py)
            policy = _Pinned(pins, policy)
        request = RouteRequest(str(hints.tenant_id), hints.model, hints.affinity, self._prefix(policy, hints),
                               hints.session)
        if self._memory is not None and policy.name == PolicyName.PREFIX_AFFINITY:
            key = request.affinity_key or request.prefix_key
            if key is not None:
                self._memory.remember(shape, request.tenant_id, key, KINDS[hints.kind], hints.body, hints.cache_salt)
        version = hints.version
        if version is not None:  # the rollout's pick first; any version if none of its engines can take it
            found = self._pick(policy, upstreams, request, outstanding, ttft, unusable, engine_load, version)
            if found is not None:
                return found
        return self._pick(policy, upstreams, request, outstanding, ttft, unusable, engine_load, None)

    @staticmethod
    def _pick(policy, upstreams: dict, request, outstanding: dict, ttft: dict, unusable, engine_load,
              version: tuple[int, int] | None) -> Upstream | None:
        """Engines of other versions of the rollout's deployment count as unusable when `version` is given."""
        deployment, wanted = version or (None, None)
        if engine_load:
            endpoints = [Endpoint(eid, u.url, 1.0, max(outstanding.get(u.instance_id, 0),
                                                       int(engine_load.get(u.instance_id, 0))),
                                  ttft.get(u.instance_id), True, u.instance_id in unusable or (
                                      u.deployment_id == deployment and u.model_version_id != wanted))
                         for eid, u in upstreams.items()]
        else:
            endpoints = [Endpoint(eid, u.url, 1.0, outstanding.get(u.instance_id, 0), ttft.get(u.instance_id),
                                  True, u.instance_id in unusable or (
                                      u.deployment_id == deployment and u.model_version_id != wanted))
                         for eid, u in upstreams.items()]
        try:
            return upstreams[policy.choose(endpoints, request).id]
        except NoEligibleEndpoint:
            return None

    def _policy(self, pools: tuple[Pool, ...]) -> tuple:
        """The pools' policy and session pins (sessions stay pinned when only the policy changes)."""
        shape = tuple((p.deployment_id, p.policy) for p in pools)  # a changed policy is a new instance
        policy = self._policies.get(shape)
        if policy is None:
            name = next((p.policy for p in pools if p.upstreams), DEFAULT_POLICY)
            policy = self._policies[shape] = _make(name, self._observe_placement)
        deployments = tuple(p.deployment_id for p in pools)
        pins = self._pins.get(deployments)
        if pins is None:
            if len(self._pins) >= MAX_CACHED_POOLS:
                self._pins.clear()
            pins = self._pins[deployments] = SessionPins(observer=self._observe_session)
        return policy, pins

    @staticmethod
    def _prefix(policy, hints) -> str | None:
        if hints.affinity or policy.name != PolicyName.PREFIX_AFFINITY:
            return None  # only prefix affinity reads it: skip hashing the prompt otherwise
        return prefix_key(hints.body, KINDS[hints.kind])


class _Pinned:
    """The pool's policy seen through its session pins (a request with a session only)."""

    __slots__ = ("pins", "policy", "name")

    def __init__(self, pins: SessionPins, policy):
        self.pins, self.policy, self.name = pins, policy, policy.name

    def choose(self, endpoints, request):
        return self.pins.choose(self.policy, endpoints, request)


def _make(name: str, observer):
    if name not in PolicyName.__members__.values():
        log.warning("unknown routing policy %r; using %s", name, DEFAULT_POLICY)
        name = DEFAULT_POLICY
    options = {"observer": observer} if name == PolicyName.PREFIX_AFFINITY and observer else {}
    return get_policy(name, **options)
