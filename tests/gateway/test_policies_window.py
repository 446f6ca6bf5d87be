"""The fixed-size record of recent placements behind prefix affinity's share bound."""
import pytest

from gateway.routing.policies.window import RecentAssignments


def test_counts_the_last_n_placements_only():
    recent = RecentAssignments(3)
    for endpoint_id in ("a", "a", "b", "c"):
        recent.add(endpoint_id)
    assert (recent.count("a"), recent.count("b"), recent.count("c"), len(recent)) == (1, 1, 1, 3)


def test_memory_is_bounded_and_departed_endpoints_are_forgotten():
    recent = RecentAssignments(4)
    for i in range(1000):
        recent.add(f"e{i}")
    assert len(recent) == 4
    assert set(recent._counts) == {"e996", "e997", "e998", "e999"}
    assert recent.count("e0") == 0


def test_a_window_needs_a_size():
    with pytest.raises(ValueError):
        RecentAssignments(0)


def _homes(policy, endpoints, keys):
    from gateway.routing.policies import RouteRequest

    return {key: policy.choose(endpoints, RouteRequest("t", "m", None, key)).id for key in keys}


def test_a_joining_endpoint_starts_the_share_window_afresh_so_the_old_engines_keep_their_keys():
    """The step of a stand-up spike: one engine served every key, four more join. With the old window the first
    engine held all of it and was over its share, so every key it is still home for spilled to a cold engine."""
    from gateway.routing.policies import get_policy
    from tests.gateway.policy_helpers import pool

    keys = [f"repo-{n}" for n in range(40)]
    policy, ring_only = get_policy("prefix_affinity"), get_policy("prefix_affinity", window=None)
    first = pool(1)
    _homes(policy, first, keys)  # the quiet phase: all on e0
    grown = first + [e for e in pool(5) if e.id != "e0"]
    expected = _homes(ring_only, grown, keys)
    kept = [key for key, home in expected.items() if home == "e0"]
    assert kept, "no key stays on e0: the test proves nothing"
    # One request per key, nothing in flight: every key goes home, the first engine's included.
    assert {key: _homes(policy, grown, [key])[key] for key in keys} == expected


def test_an_endpoint_leaving_keeps_the_window():
    from gateway.routing.policies import get_policy
    from tests.gateway.policy_helpers import pool

    policy = get_policy("prefix_affinity")
    _homes(policy, pool(3), [f"k{n}" for n in range(30)])
    recent = policy._recent
    before = {e: recent.count(e) for e in ("e0", "e1", "e2")}
    _homes(policy, pool(3)[:2], ["k-next"])
    assert sum(recent.count(e) for e in ("e0", "e1", "e2")) == sum(before.values()) + 1
