"""Session affinity over the routing policies, with fake endpoints (no HTTP)."""
from __future__ import annotations

import ast
import collections
import dataclasses
import os
import subprocess
import sys

import pytest

from bench._procs import REPO_ROOT
from gateway.config.snapshot import Pool, Upstream
from gateway.routing.balancer import RouteHints
from gateway.routing.policies import NoEligibleEndpoint, RouteRequest, get_policy
from gateway.routing.policies.session_affinity import KEPT, PLACED, SPILLED, SessionPins
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


def test_new_sessions_spread_over_the_engines_by_their_hash():
    policy, pins, endpoints = get_policy("round_robin"), SessionPins(), pool(4)
    placed = collections.Counter(pins.choose(policy, endpoints, request(f"s{i}")).id for i in range(400))
    assert sorted(placed) == ["e0", "e1", "e2", "e3"] and min(placed.values()) >= 70  # 100 each on average


@pytest.mark.parametrize("name", ["round_robin", "least_outstanding", "latency_ewma", "prefix_affinity"])
def test_two_gateway_processes_place_and_move_a_session_alike(name):
    """Pins are not shared between processes: the placement must come out the same in each."""
    first, second = (SessionPins(), get_policy(name)), (SessionPins(), get_policy(name))
    endpoints = pool(4)
    sessions = [f"agent-{i}" for i in range(40)]
    places = [[pins.choose(policy, endpoints, request(s)).id for s in sessions] for pins, policy in (first, second)]
    assert places[0] == places[1]
    down = [dataclasses.replace(e, ejected=True) if e.id == "e0" else e for e in endpoints]
    moves = [[pins.choose(policy, down, request(s)).id for s in sessions] for pins, policy in (first, second)]
    assert moves[0] == moves[1] and "e0" not in moves[0]
    assert [m for p, m in zip(places[0], moves[0]) if p != "e0"] == [p for p in places[0] if p != "e0"]


def test_an_overloaded_engine_spills_single_requests_and_keeps_the_session():
    results = []
    policy, pins = get_policy("least_outstanding"), SessionPins(observer=results.append)
    endpoints = pool(2)
    home = pins.choose(policy, endpoints, request("agent")).id
    other = "e1" if home == "e0" else "e0"
    # The home engine holds 7 in flight, the other none: 8 > max(ceil(1.75 x 4), 4 + 1) = 7, over the bound.
    busy = with_load(endpoints, **{home: 7})
    assert pins.choose(policy, busy, request("agent")).id == other
    # Load evens out again: the session is back home. Its pin never moved, so another gateway process,
    # which may not have seen the load, holds the same pin.
    assert pins.pinned("tenant-a", "agent") == home
    assert {pins.choose(policy, endpoints, request("agent")).id for _ in range(10)} == {home}
    assert results[:3] == [PLACED, KEPT, SPILLED] and set(results[3:]) == {KEPT}


PLACE_IN_A_PROCESS = """
from gateway.routing.policies import RouteRequest, get_policy
from gateway.routing.policies.session_affinity import SessionPins
from tests.gateway.policy_helpers import pool
pins, policy = SessionPins(), get_policy("least_outstanding")
print([pins.choose(policy, pool(5), RouteRequest("7", "m", session=f"agent-{i}")).id for i in range(30)])
"""


def test_separate_processes_with_different_hash_seeds_pin_sessions_alike():
    """Real processes, as `--workers` starts them: nothing in the placement may depend on Python's hash()."""
    places = {subprocess.run([sys.executable, "-c", PLACE_IN_A_PROCESS], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, cwd=REPO_ROOT).stdout for seed in ("1", "2")}
    assert len(places) == 1 and len(set(ast.literal_eval(places.pop()))) == 5  # one placement, over all five engines


def test_a_new_session_is_pinned_to_its_home_even_when_its_first_request_spills():
    policy, endpoints = get_policy("least_outstanding"), pool(3)
    home = SessionPins().choose(policy, endpoints, request("s")).id
    pins = SessionPins()
    # Its home holds 4 in flight, the others none: 5 > max(ceil(1.75 x 5/3), ceil(5/3) + 1) = 3.
    assert pins.choose(policy, with_load(endpoints, **{home: 4}), request("s")).id != home
    assert pins.pinned("tenant-a", "s") == home and pins.choose(policy, endpoints, request("s")).id == home


def test_within_the_bound_a_busier_engine_keeps_its_session():
    policy, pins = get_policy("least_outstanding"), SessionPins()
    endpoints = pool(2)
    home = pins.choose(policy, endpoints, request("chat")).id
    # 2 in flight at home, 1 elsewhere: 3 <= max(ceil(1.75 x 2), 2 + 1) = 4, within the bound.
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
    assert pins.pinned("a", "same") == a and pins.pinned("b", "same") == b
    down = [dataclasses.replace(e, ejected=True) if e.id == a else e for e in endpoints]
    moved = pins.choose(policy, down, request("same", tenant="a")).id
    assert pins.pinned("a", "same") == moved != a and pins.pinned("b", "same") == b  # b's did not move with it
    # The tenant is part of the session's hash: the same ids do not all land alike.
    ids = [f"s{i}" for i in range(20)]
    assert [pins.choose(policy, endpoints, request(i, tenant="a")).id for i in ids] != \
        [pins.choose(policy, endpoints, request(i, tenant="b")).id for i in ids]


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
