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
