"""Session affinity over the routing policies, with fake endpoints (no HTTP)."""
from __future__ import annotations

import dataclasses

import pytest

from gateway.config.snapshot import Pool, Upstream
from gateway.routing.balancer import RouteHints
from gateway.routing.policies import NoEligibleEndpoint, RouteRequest, get_policy
from gateway.routing.policies.session_affinity import KEPT, MOVED, PLACED, SessionPins
from gateway.routing.policy_chooser import PolicyChooser
from tests.gateway.policy_helpers import pool


def request(session: str | None, tenant: str = "tenant-a") -> RouteRequest:
    return RouteRequest(tenant_id=tenant, model="qwen-coder", session=session)


def with_load(endpoints, **outstanding):
    return [dataclasses.replace(e, outstanding=outstanding.get(e.id, 0)) for e in endpoints]


@pytest.mark.parametrize("name", ["round_robin", "least_outstanding", "latency_ewma", "prefix_affinity"])
def test_a_session_stays_on_its_engine_over_every_policy(name):
    policy, pins, endpoints = get_policy(name), SessionPins(), pool(4)
    first = pins.choose(policy, endpoints, request("s1")).id
    assert {pins.choose(policy, endpoints, request("s1")).id for _ in range(50)} == {first}


def test_sessions_spread_as_the_policy_places_them():
    policy, pins, endpoints = get_policy("round_robin"), SessionPins(), pool(4)
    placed = [pins.choose(policy, endpoints, request(f"s{i}")).id for i in range(8)]
    assert sorted(placed) == ["e0", "e0", "e1", "e1", "e2", "e2", "e3", "e3"]


def test_an_overloaded_engine_moves_the_session_which_then_sticks_to_the_new_one():
    results = []
    policy, pins = get_policy("least_outstanding"), SessionPins(observer=results.append)
    endpoints = pool(2)
    home = pins.choose(policy, endpoints, request("agent")).id
    other = "e1" if home == "e0" else "e0"
    # The home engine holds 4 in flight, the other none: 5 > ceil(1.25 x 2.5) = 4, over the bound.
    busy = with_load(endpoints, **{home: 4})
    moved = pins.choose(policy, busy, request("agent")).id
    assert moved == other
    # Load evens out again: the session stays where it moved (its context is cached there now).
    assert {pins.choose(policy, endpoints, request("agent")).id for _ in range(10)} == {other}
    assert results[:2] == [PLACED, MOVED] and set(results[2:]) == {KEPT}


def test_within_the_bound_a_busier_engine_keeps_its_session():
    policy, pins = get_policy("least_outstanding"), SessionPins()
    endpoints = pool(2)
    home = pins.choose(policy, endpoints, request("chat")).id
    # 2 in flight at home, 1 elsewhere: 3 <= max(ceil(1.25 x 2), 2 + 1) = 3, within the bound.
    busier = with_load(endpoints, **{home: 2, ("e1" if home == "e0" else "e0"): 1})
    assert pins.choose(policy, busier, request("chat")).id == home


def test_an_ejected_engine_moves_its_sessions_and_they_do_not_flap_back():
    policy, pins, endpoints = get_policy("round_robin"), SessionPins(), pool(3)
    home = pins.choose(policy, endpoints, request("s")).id
    ejected = [dataclasses.replace(e, ejected=True) if e.id == home else e for e in endpoints]
    new = pins.choose(policy, ejected, request("s")).id
    assert new != home
    assert pins.choose(policy, endpoints, request("s")).id == new  # readmitted: the session stays put


def test_the_only_engine_keeps_the_session_even_over_the_bound():
    policy, pins = get_policy("least_outstanding"), SessionPins()
    endpoints = pool(2)
    home = pins.choose(policy, endpoints, request("s")).id
    alone = [dataclasses.replace(e, outstanding=9) if e.id == home else dataclasses.replace(e, healthy=False)
             for e in endpoints]
    assert pins.choose(policy, alone, request("s")).id == home


def test_no_eligible_engine_is_still_an_error():
    policy, pins = get_policy("round_robin"), SessionPins()
    with pytest.raises(NoEligibleEndpoint):
        pins.choose(policy, pool(2, healthy=False), request("s"))


def test_sessions_of_two_tenants_with_the_same_id_are_separate():
    pins, policy = SessionPins(), get_policy("round_robin")
    endpoints = pool(2)
    a = pins.choose(policy, endpoints, request("same", tenant="a")).id
    b = pins.choose(policy, endpoints, request("same", tenant="b")).id
    assert a != b and pins.pinned("a", "same") == a and pins.pinned("b", "same") == b


def test_the_pin_table_is_bounded_least_recently_used_first():
    pins, policy, endpoints = SessionPins(max_sessions=3), get_policy("round_robin"), pool(2)
    for session in ("s1", "s2", "s3"):
        pins.choose(policy, endpoints, request(session))
    pins.choose(policy, endpoints, request("s1"))  # used again: s2 is now the oldest
    pins.choose(policy, endpoints, request("s4"))
    assert len(pins) == 3 and pins.pinned("tenant-a", "s2") is None and pins.pinned("tenant-a", "s1")


def test_requests_without_a_session_are_the_policys_alone():
    pins, policy, endpoints = SessionPins(), get_policy("round_robin"), pool(2)
    assert [pins.choose(policy, endpoints, request(None)).id for _ in range(4)] == ["e0", "e1", "e0", "e1"]
    assert len(pins) == 0


def gateway_pools(policy: str = "round_robin") -> tuple[Pool, ...]:
    upstreams = tuple(Upstream(10 + i, f"http://127.0.0.1:{9200 + i}", 1, 1, False) for i in range(3))
    return (Pool(1, 1, 1, policy, True, upstreams, None),)


def test_the_gateways_chooser_pins_sessions_over_the_deployments_policy():
    observed = []
    chooser, pools = PolicyChooser(observe_session=observed.append), gateway_pools()
    hints = RouteHints({}, "chat", "m", tenant_id=1, session="agent-7")
    picks = {chooser.choose(pools, hints, {}, {}, set()).instance_id for _ in range(6)}
    plain = {chooser.choose(pools, RouteHints({}, "chat", "m", tenant_id=1), {}, {}, set()).instance_id
             for _ in range(6)}
    assert len(picks) == 1 and len(plain) == 3  # round-robin still spreads requests without a session
    assert observed == [PLACED] + [KEPT] * 5
    home = picks.pop()
    moved = chooser.choose(pools, hints, {}, {}, {home}).instance_id  # its engine failed this request
    assert moved != home and chooser.choose(pools, hints, {}, {}, set()).instance_id == moved
