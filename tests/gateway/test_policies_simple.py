"""Round-robin, least-outstanding and latency-EWMA policies on fake endpoints."""
import random
from collections import Counter
from dataclasses import replace

import pytest

from gateway.routing.policies import NoEligibleEndpoint, PolicyName, get_policy
from gateway.routing.policies.latency_ewma import ewma
from tests.gateway.policy_helpers import REQUEST, pick_many, pool


@pytest.mark.parametrize("name", list(PolicyName))
def test_every_policy_refuses_a_pool_with_nothing_eligible(name):
    endpoints = [replace(e, healthy=False) for e in pool(2)] + [replace(pool(3)[2], weight=0)]
    with pytest.raises(NoEligibleEndpoint):
        get_policy(name).choose(endpoints, REQUEST)


def test_unknown_policy_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown routing policy 'fastest'"):
        get_policy("fastest")


def test_round_robin_cycles_through_equal_endpoints():
    assert pick_many(get_policy("round_robin"), pool(3), 6) == ["e0", "e1", "e2"] * 2


def test_round_robin_honours_weights_without_bursts():
    endpoints = pool(2)
    endpoints[1] = replace(endpoints[1], weight=0.25)  # a canary at one fifth of the traffic
    picks = pick_many(get_policy("round_robin"), endpoints, 100)
    assert Counter(picks) == {"e0": 80, "e1": 20}
    assert "e1e1" not in "".join(picks)


def test_round_robin_skips_ejected_and_forgets_departed_endpoints():
    policy = get_policy("round_robin")
    endpoints = pool(3)
    endpoints[1] = replace(endpoints[1], ejected=True)
    assert set(pick_many(policy, endpoints, 10)) == {"e0", "e2"}
    pick_many(policy, pool(1), 1)
    assert set(policy._credit) == {"e0"}


def test_least_outstanding_picks_the_idlest_per_weight():
    endpoints = [replace(e, outstanding=n) for e, n in zip(pool(3), (5, 2, 3))]
    assert get_policy("least_outstanding").choose(endpoints, REQUEST).id == "e1"
    endpoints[2] = replace(endpoints[2], weight=2.0)  # (3 + 1) / 2 beats (2 + 1) / 1
    assert get_policy("least_outstanding").choose(endpoints, REQUEST).id == "e2"


def test_least_outstanding_spreads_ties():
    picks = pick_many(get_policy("least_outstanding", rng=random.Random(1)), pool(4), 200)
    assert set(picks) == {"e0", "e1", "e2", "e3"}


def test_latency_ewma_prefers_the_fastest_unless_it_is_busier():
    endpoints = [replace(e, ttft_ewma=t) for e, t in zip(pool(3), (0.30, 0.10, 0.20))]
    policy = get_policy("latency_ewma", explore=0.0)
    assert policy.choose(endpoints, REQUEST).id == "e1"
    endpoints[1] = replace(endpoints[1], outstanding=3)  # 0.1 × 4 > 0.2 × 1
    assert policy.choose(endpoints, REQUEST).id == "e2"


def test_latency_ewma_probes_a_cold_endpoint_once_at_a_time():
    endpoints = [replace(e, ttft_ewma=0.1) for e in pool(2)] + [pool(3)[2]]
    policy = get_policy("latency_ewma", explore=0.0)
    assert policy.choose(endpoints, REQUEST).id == "e2"
    endpoints[2] = replace(endpoints[2], outstanding=1)  # a probe is in flight: wait for it
    assert policy.choose(endpoints, REQUEST).id in {"e0", "e1"}


def test_latency_ewma_exploration_reaches_slow_endpoints():
    endpoints = [replace(e, ttft_ewma=t) for e, t in zip(pool(2), (0.1, 5.0))]
    policy = get_policy("latency_ewma", explore=0.1, rng=random.Random(7))
    assert "e1" in pick_many(policy, endpoints, 200)


def test_ewma_update_rule():
    assert ewma(None, 0.5) == 0.5
    assert ewma(1.0, 0.0, alpha=0.25) == 0.75
