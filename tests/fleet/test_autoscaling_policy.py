"""The scaling policy is a pure function: property tests over rules, signals and clocks (no servers)."""
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from fleet.autoscaling.policy import Rules, Sample, Situation, decide

INTERVAL = 5.0


@st.composite
def rules(draw):
    low = draw(st.integers(0, 4))
    high = draw(st.integers(max(low, 1), 10))
    return Rules(min_replicas=low, max_replicas=high, queue_per_instance=draw(st.sampled_from([2.0, 8.0])),
                 ttft_p95_slo_ms=draw(st.sampled_from([None, 300.0])), max_step=draw(st.integers(1, 3)),
                 up_window_seconds=20, idle_window_seconds=60, zero_after_idle_seconds=120,
                 cooldown_up_seconds=30, cooldown_down_seconds=90, sample_interval_seconds=INTERVAL)


def trace(draw, serving: int, now: float, count: int) -> list[Sample]:
    loads = draw(st.lists(st.tuples(st.floats(0, 200), st.floats(0, 50), st.floats(0, 1), st.floats(0, 2000),
                                    st.integers(0, 50)), min_size=count, max_size=count))
    return [Sample(at=now - INTERVAL * (count - 1 - i), serving=serving, waiting=w, running=r, kv_cache_usage=kv,
                   ttft_p95_ms=t, requests=q) for i, (w, r, kv, t, q) in enumerate(loads)]


@st.composite
def cases(draw):
    policy = draw(rules())
    serving = draw(st.integers(0, 12))
    now = 10_000.0
    samples = trace(draw, serving, now, draw(st.integers(0, 40)))
    last_up = draw(st.none() | st.floats(now - 500, now))
    last_down = draw(st.none() | st.floats(now - 500, now))
    return policy, samples, Situation(now=now, serving=serving, last_scale_up_at=last_up, last_scale_down_at=last_down,
                                      busy=draw(st.booleans()), wake_requested=draw(st.booleans()))


@given(cases())
@hsettings(max_examples=400, deadline=None)
def test_never_below_min_or_above_max(case):
    policy, samples, situation = case
    decision = decide(policy, samples, situation)
    if policy.min_replicas <= situation.serving <= policy.max_replicas:
        assert policy.min_replicas <= decision.to_serving <= policy.max_replicas
    else:  # a size outside the bounds (min or max just changed) goes straight to the bound
        assert decision.to_serving in (policy.min_replicas, policy.max_replicas)


@given(cases())
@hsettings(max_examples=400, deadline=None)
def test_cooldowns_and_the_rollout_guard_hold(case):
    policy, samples, situation = case
    decision = decide(policy, samples, situation)
    if decision.rule in ("min", "max", "wake"):
        return
    if decision.action == "up":
        assert situation.last_scale_up_at is None or situation.now - situation.last_scale_up_at >= 30
        assert decision.to_serving - decision.from_serving <= policy.max_step
    if decision.action == "down":
        assert not situation.busy
        assert decision.to_serving == decision.from_serving - 1
        for last in (situation.last_scale_up_at, situation.last_scale_down_at):
            assert last is None or situation.now - last >= 90


@given(cases())
@hsettings(max_examples=400, deadline=None)
def test_scale_to_zero_only_after_the_whole_idle_period_without_a_request(case):
    policy, samples, situation = case
    decision = decide(policy, samples, situation)
    if decision.rule == "scale-to-zero":
        assert policy.min_replicas == 0 and decision.to_serving == 0
        recent = [s for s in samples if s.at >= situation.now - 120]
        assert recent and recent[0].at <= situation.now - 120 + INTERVAL
        assert all(s.requests == 0 and s.waiting == 0 and s.running == 0 for s in recent)


def simulate(policy: Rules, load, seconds: float = 3600, start: int | None = None) -> list:
    """Run the policy every sample interval against load(t) → (waiting, running) for the whole deployment."""
    serving = policy.min_replicas if start is None else start
    samples, decisions, last_up, last_down = [], [], None, None
    t = 0.0
    while t <= seconds:
        waiting, running = load(t)
        samples.append(Sample(at=t, serving=serving, waiting=waiting, running=running, requests=int(waiting + running)))
        samples = [s for s in samples if s.at >= t - 1000]
        decision = decide(policy, samples, Situation(now=t, serving=serving, last_scale_up_at=last_up,
                                                     last_scale_down_at=last_down))
        if decision.changes:
            decisions.append((t, decision))
            serving = decision.to_serving
            if decision.action == "up":
                last_up = t
            else:
                last_down = t
        t += INTERVAL
    return decisions


@given(st.integers(1, 4), st.floats(1.0, 20.0), st.sampled_from([1, 2, 3]))
@hsettings(max_examples=60, deadline=None)
def test_a_signal_oscillating_around_a_threshold_moves_nothing(replicas, amplitude, period):
    policy = Rules(min_replicas=1, max_replicas=8, queue_per_instance=8.0, low_water_per_instance=1.0,
                   up_window_seconds=20, idle_window_seconds=60, cooldown_up_seconds=30, cooldown_down_seconds=90,
                   sample_interval_seconds=INTERVAL)
    def around_up(t):
        return (8.0 * replicas + (amplitude if int(t / INTERVAL / period) % 2 else -amplitude)), 0.0

    def around_low(t):
        return 0.0, replicas * (1.0 + (0.5 if int(t / INTERVAL / period) % 2 else -0.5))

    assert simulate(policy, around_up, start=replicas) == []
    assert simulate(policy, around_low, start=replicas) == []


def test_a_burst_scales_up_in_steps_and_idle_brings_it_back_down_one_at_a_time():
    policy = Rules(min_replicas=1, max_replicas=6, queue_per_instance=8.0, up_window_seconds=20,
                   idle_window_seconds=60, cooldown_up_seconds=30, cooldown_down_seconds=90, max_step=2)
    def burst(t):
        return (100.0, 10.0) if 100 <= t < 400 else (0.0, 0.1)

    decisions = simulate(policy, burst, seconds=1500)
    ups = [d for _, d in decisions if d.action == "up"]
    downs = [d for _, d in decisions if d.action == "down"]
    assert [d.to_serving for d in ups] == [3, 5, 6] and all(d.rule == "queue" for d in ups)
    assert [d.to_serving for d in downs] == [5, 4, 3, 2, 1] and all(d.rule == "idle" for d in downs)
    first_up = decisions[0][0]
    assert 120 <= first_up <= 125  # the queue had to stay high for the whole 20 s window


def test_scale_to_zero_and_the_wake():
    policy = Rules(min_replicas=0, max_replicas=2, idle_window_seconds=60, zero_after_idle_seconds=300,
                   cooldown_down_seconds=90)
    decisions = simulate(policy, lambda t: (0.0, 0.0), seconds=600, start=1)
    assert [(t, d.rule) for t, d in decisions] == [(295.0, "scale-to-zero")]  # 300 s idle, within one sample
    asleep = decide(policy, [], Situation(now=1000, serving=0))
    assert asleep.action == "hold" and "asleep" in asleep.reason
    woken = decide(policy, [], Situation(now=1000, serving=0, wake_requested=True))
    assert (woken.action, woken.to_serving, woken.rule) == ("up", 1, "wake")


def test_a_ttft_far_over_the_slo_asks_for_a_proportional_step_and_the_largest_ask_wins():
    policy = Rules(min_replicas=1, max_replicas=10, queue_per_instance=8.0, ttft_p95_slo_ms=500.0, max_step=4,
                   up_window_seconds=10, cooldown_up_seconds=30)

    def decided(**figures):
        samples = [Sample(at=t, serving=2, requests=10, **figures) for t in (0.0, 5.0, 10.0)]
        return decide(policy, samples, Situation(now=10.0, serving=2))

    slow = decided(ttft_p95_ms=1500.0)  # 3× the SLO → 2 × 3 = 6 wanted, 4 at most per step
    assert (slow.rule, slow.to_serving) == ("ttft", 6)
    barely = decided(ttft_p95_ms=510.0)
    assert (barely.rule, barely.to_serving) == ("ttft", 3)
    both = decided(waiting=18.0, ttft_p95_ms=2000.0)  # queue: ceil(2 × 9 / 8) = 3; TTFT: 2 × 4 = 8
    assert (both.rule, both.to_serving) == ("ttft", 6)
    queue_wins = decided(waiting=60.0, ttft_p95_ms=510.0)  # queue: ceil(2 × 30 / 8) = 8; TTFT: 3
    assert (queue_wins.rule, queue_wins.to_serving) == ("queue", 6)


def test_slow_first_tokens_of_a_handful_of_requests_move_nothing():
    policy = Rules(min_replicas=1, max_replicas=4, ttft_p95_slo_ms=500.0, up_window_seconds=10)
    few = [Sample(at=t, serving=1, ttft_p95_ms=900.0, requests=3) for t in (0.0, 5.0, 10.0)]  # 9 requests
    assert decide(policy, few, Situation(now=10.0, serving=1)).action == "hold"
    many = [Sample(at=t, serving=1, ttft_p95_ms=900.0, requests=7) for t in (0.0, 5.0, 10.0)]  # 21 requests
    assert decide(policy, many, Situation(now=10.0, serving=1)).rule == "ttft"


def test_a_deployment_just_woken_is_not_put_back_to_sleep_while_its_engine_starts():
    """The request that woke it waits at the gateway and shows in no sample: hours of quiet samples from
    before the wake, and a cold start longer than the down cooldown, must not send it back to zero."""
    policy = Rules(min_replicas=0, max_replicas=2, idle_window_seconds=60, zero_after_idle_seconds=300,
                   cooldown_down_seconds=90)
    quiet = [Sample(at=t, serving=0 if t < 1000 else 1) for t in range(0, 1200, 5)]
    woken_at = 1000.0
    for now in (1100.0, 1195.0):  # past the down cooldown, within the idle period since the wake
        situation = Situation(now=now, serving=1, last_scale_up_at=woken_at)
        assert decide(policy, [s for s in quiet if s.at <= now], situation).action == "hold"
    later = [Sample(at=t, serving=1) for t in range(1200, 1305, 5)]
    gone = decide(policy, quiet + later, Situation(now=1300.0, serving=1, last_scale_up_at=woken_at))
    assert (gone.rule, gone.to_serving) == ("scale-to-zero", 0)


def test_a_gap_in_the_samples_is_not_a_window():
    policy = Rules(min_replicas=1, max_replicas=4, up_window_seconds=20)
    samples = [Sample(at=t, serving=1, waiting=100) for t in (0, 5, 20)]  # nothing between 5 and 20
    assert decide(policy, samples, Situation(now=20, serving=1)).action == "hold"
    samples = [Sample(at=t, serving=1, waiting=100) for t in (0, 5, 10, 15, 20)]
    assert decide(policy, samples, Situation(now=20, serving=1)).action == "up"
