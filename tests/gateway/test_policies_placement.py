"""Prefix affinity reports whether each keyed request landed on its key's home endpoint."""
from dataclasses import replace

from gateway.routing.policies import RouteRequest, get_policy
from tests.gateway.policy_helpers import pool


def test_home_while_within_bound_then_spill_when_loaded_or_ejected():
    seen: list[bool] = []
    policy = get_policy("prefix_affinity", observer=seen.append)
    endpoints = pool(4)
    request = RouteRequest(tenant_id="t", model="m", affinity_key="repo:src/app.py")
    home = policy.choose(endpoints, request)
    assert policy.choose(endpoints, request) == home
    busy = [replace(e, outstanding=10) if e.id == home.id else e for e in endpoints]
    assert policy.choose(busy, request) != home
    ejected = [replace(e, ejected=True) if e.id == home.id else e for e in endpoints]
    assert policy.choose(ejected, request) != home
    assert seen == [True, True, False, False]


def test_requests_without_a_key_are_not_counted():
    seen: list[bool] = []
    get_policy("prefix_affinity", observer=seen.append).choose(pool(3), RouteRequest(tenant_id="t", model="m"))
    assert seen == []
