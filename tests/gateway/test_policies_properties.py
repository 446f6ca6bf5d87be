"""Properties every policy keeps, and prefix affinity's hashing and load bound."""
import math
import random
from collections import Counter
from dataclasses import replace

from hypothesis import given, settings, strategies as st

from gateway.policies import Endpoint, PolicyName, RouteRequest, get_policy
from tests.gateway.policy_helpers import pool

endpoint_st = st.builds(
    Endpoint, id=st.text("abcdef", min_size=1, max_size=3), url=st.just("http://x"),
    weight=st.sampled_from([0, 0.1, 1.0, 2.0]), outstanding=st.integers(0, 50),
    ttft_ewma=st.none() | st.floats(0.01, 5.0), healthy=st.booleans(), ejected=st.booleans(),
)
request_st = st.builds(RouteRequest, tenant_id=st.sampled_from(["a", "b"]), model=st.just("m"),
                       affinity_key=st.none() | st.text(max_size=8),
                       prefix_key=st.none() | st.text(max_size=8))


@settings(max_examples=150, deadline=None)
@given(endpoints=st.lists(endpoint_st, min_size=1, max_size=8, unique_by=lambda e: e.id),
       request=request_st, name=st.sampled_from(list(PolicyName)), seed=st.integers(0, 99))
def test_no_policy_ever_returns_an_ineligible_endpoint(endpoints, request, name, seed):
    endpoints = [*endpoints, Endpoint(id="ok", url="http://ok", outstanding=seed)]
    policy = get_policy(name) if name == PolicyName.ROUND_ROBIN else get_policy(name, rng=random.Random(seed))
    for _ in range(3):
        assert policy.choose(endpoints, request).eligible


def key_request(key):
    return RouteRequest(tenant_id="tenant-a", model="m", prefix_key=key)


@given(keys=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=20),
       loads=st.lists(st.integers(0, 3), min_size=4, max_size=4))
def test_a_prefix_stays_on_its_endpoint_while_within_the_bound(keys, loads):
    # Loads 0..3 against a mean of at least 0: the bound ceil(1.25 × mean) + 1 may refuse a
    # loaded owner, so only owners that are within the bound are checked for stability.
    policy = get_policy("prefix_affinity")
    endpoints = [replace(e, outstanding=n) for e, n in zip(pool(4), loads)]
    idle = pool(4)
    for key in keys:
        owner = policy.choose(idle, key_request(key)).id
        assert policy.choose(idle, key_request(key)).id == owner
        chosen = policy.choose(endpoints, key_request(key))
        bound = math.ceil(1.25 * sum(loads) / 4) + 1
        if loads[int(owner[1:])] + 1 <= bound:
            assert chosen.id == owner


def test_an_explicit_affinity_key_wins_over_the_prefix():
    policy = get_policy("prefix_affinity")
    a = RouteRequest("t", "m", affinity_key="acme/api:src/x.py", prefix_key="p1")
    b = RouteRequest("t", "m", affinity_key="acme/api:src/x.py", prefix_key="p2")
    assert policy.choose(pool(8), a).id == policy.choose(pool(8), b).id


def owners(policy, endpoints, keys):
    return {key: policy.choose(endpoints, key_request(key)).id for key in keys}


def test_adding_an_endpoint_moves_only_about_one_nth_of_the_keys():
    keys = [f"prefix-{i}" for i in range(3000)]
    before = owners(get_policy("prefix_affinity"), pool(5), keys)
    after = owners(get_policy("prefix_affinity"), pool(6), keys)
    moved = [k for k in keys if before[k] != after[k]]
    assert all(after[k] == "e5" for k in moved)  # keys only move to the newcomer
    assert 0.5 / 6 < len(moved) / len(keys) < 1.6 / 6


def test_ejecting_an_endpoint_moves_only_its_keys_and_they_come_back():
    keys = [f"prefix-{i}" for i in range(1000)]
    policy = get_policy("prefix_affinity")
    before = owners(policy, pool(4), keys)
    ejected = [replace(e, ejected=(e.id == "e2")) for e in pool(4)]
    during = owners(policy, ejected, keys)
    assert all(during[k] == before[k] for k in keys if before[k] != "e2")
    assert owners(policy, pool(4), keys) == before


def test_weights_shape_the_key_share_and_zero_gets_none():
    keys = [f"prefix-{i}" for i in range(4000)]
    endpoints = [replace(e, weight=w) for e, w in zip(pool(3), (1.0, 3.0, 0))]
    share = Counter(owners(get_policy("prefix_affinity"), endpoints, keys).values())
    assert share["e2"] == 0
    assert 2.0 < share["e1"] / share["e0"] < 4.5


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 8), hot=st.integers(1, 5),
       departures=st.booleans())
def test_bounded_load_holds_under_an_arrival_stream(seed, n, hot, departures):
    rng = random.Random(seed)
    policy = get_policy("prefix_affinity", rng=random.Random(seed))
    load = {f"e{i}": 0 for i in range(n)}
    keys = [f"hot-{i}" for i in range(hot)]  # a few hot prefixes: the worst case for hashing
    for _ in range(300):
        if departures and rng.random() < 0.4 and any(load.values()):
            load[rng.choice([k for k, v in load.items() if v])] -= 1
            continue
        endpoints = [Endpoint(id=i, url="http://x", outstanding=v) for i, v in load.items()]
        chosen = policy.choose(endpoints, key_request(rng.choice(keys)))
        load[chosen.id] += 1
        bound = math.ceil(1.25 * sum(load.values()) / n) + 1
        assert load[chosen.id] <= bound
        if not departures:
            assert max(load.values()) <= bound
