"""Traffic weights of a rollout in the gateway (pure): a request picks a version by weight — or stickily by its
key — then an engine of that version by the pool's policy; with none of that version left, any version serves."""
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from gateway.config.snapshot import Pool, Upstream
from gateway.routing.balancer import RouteHints
from gateway.routing.policy_chooser import PolicyChooser
from gateway.routing.versions import pick_version, sticky_key, sticky_point, version_at

A, B, DEPLOYMENT = 11, 22, 7


def pool(weight_b: float, *, a_engines=3, b_engines=1, sticky_by="session") -> tuple[Pool, ...]:
    upstreams = tuple(Upstream(n, f"http://e{n}", DEPLOYMENT, A, False) for n in range(a_engines))
    upstreams += tuple(Upstream(100 + n, f"http://b{n}", DEPLOYMENT, B, False) for n in range(b_engines))
    weights = ((B, weight_b), (A, 1 - weight_b)) if weight_b is not None else ()
    return (Pool(DEPLOYMENT, None, A, policy="round_robin", upstreams=upstreams, version_weights=weights,
                 sticky_by=sticky_by),)


def route(pools, version, exclude=frozenset()) -> Upstream | None:
    hints = RouteHints({"prompt": "x"}, "completions", "m", None, 1, version)
    return PolicyChooser().choose(pools, hints, {}, {}, set(exclude))


def test_without_a_split_no_version_is_picked():
    assert pick_version(pool(None), "session:x", 0.5) is None


def test_draws_follow_the_weights():
    pools = pool(0.1)
    picks = Counter(pick_version(pools, None, n / 1000)[1] for n in range(1000))
    assert picks == {B: 100, A: 900}


def test_the_picked_version_is_the_only_one_routed_and_any_serves_when_its_engines_are_gone():
    pools = pool(0.5)
    assert {route(pools, (DEPLOYMENT, B)).model_version_id for _ in range(10)} == {B}
    assert {route(pools, (DEPLOYMENT, A)).model_version_id for _ in range(10)} == {A}
    assert route(pools, (DEPLOYMENT, B), exclude={100}).model_version_id == A  # B's engine already failed


def test_sticky_keys_follow_the_mode():
    assert sticky_key("session", b"abc", "dev@x", 5) == "session:abc"
    assert sticky_key("session", None, "dev@x", 5) == "user:dev@x"
    assert sticky_key("session", None, None, 5) is None
    assert sticky_key("api_key", b"abc", "dev@x", 5) == "key:5"
    assert sticky_key("none", b"abc", "dev@x", 5) is None


@given(key=st.text(min_size=1), low=st.floats(0, 1), high=st.floats(0, 1), draw=st.floats(0, 0.999))
def test_a_sticky_caller_on_the_new_version_stays_there_as_its_weight_grows(key, low, high, draw):
    low, high = min(low, high), max(low, high)
    before = pick_version(pool(low), f"session:{key}", draw)
    after = pick_version(pool(high), f"session:{key}", draw)
    if before[1] == B:
        assert after[1] == B
    assert pick_version(pool(low), f"session:{key}", draw) == before  # the same key, the same version


@given(weights=st.lists(st.floats(0, 1), min_size=1, max_size=4), point=st.floats(0, 0.999999))
def test_a_version_without_weight_is_never_picked(weights, point):
    pairs = tuple((n, w) for n, w in enumerate(weights))
    if any(w > 0 for w in weights):
        assert dict(pairs)[version_at(pairs, point)] > 0


def test_sticky_points_spread_evenly():
    share = sum(sticky_point(DEPLOYMENT, f"user-{n}") < 0.1 for n in range(10_000)) / 10_000
    assert 0.08 < share < 0.12
