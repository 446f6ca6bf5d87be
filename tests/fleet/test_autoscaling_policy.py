"""The scaling policy is a pure function: property tests over rules, signals and clocks (no servers)."""
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from fleet.autoscaling.policy import SURGE_FACTOR, Rules, Sample, Situation, decide, nudge_level

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
                                    st.integers(0, 50), st.none() | st.tuples(st.floats(0, 300), st.floats(0, 300))),
                          min_size=count, max_size=count))
    return [Sample(at=now - INTERVAL * (count - 1 - i), serving=serving, waiting=w, running=r, kv_cache_usage=kv,
                   ttft_p95_ms=t, requests=q, held=g and g[0], gateway_waiting=g and g[1])
            for i, (w, r, kv, t, q, g) in enumerate(loads)]


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
        assert all(s.requests == 0 and s.waiting == 0 and s.running == 0 and not s.held for s in recent)


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


OSCILLATING = Rules(min_replicas=1, max_replicas=8, queue_per_instance=8.0, low_water_per_instance=1.0,
                    up_window_seconds=20, idle_window_seconds=60, cooldown_up_seconds=30, cooldown_down_seconds=90,
                    sample_interval_seconds=INTERVAL)


def swinging(level: float, amplitude: float, period: int):
    """(waiting, running) alternating between level + amplitude and level - amplitude every `period` samples."""
    return lambda t: (level + (amplitude if int(t / INTERVAL / period) % 2 else -amplitude), 0.0)


@given(st.integers(1, 4), st.floats(0.01, 0.99), st.sampled_from([1, 2, 3]))
@hsettings(max_examples=60, deadline=None)
def test_a_signal_oscillating_around_a_threshold_moves_nothing(replicas, share, period):
    """Around the up threshold (peaks under the surge level) and around the low-water mark: no decision at all."""
    amplitude = share * 8.0 * replicas  # the peaks stay under SURGE_FACTOR × the threshold

    def around_low(t):
        return 0.0, replicas * (1.0 + (0.5 if int(t / INTERVAL / period) % 2 else -0.5))

    assert simulate(OSCILLATING, swinging(8.0 * replicas, amplitude, period), start=replicas) == []
    assert simulate(OSCILLATING, around_low, start=replicas) == []


@given(st.integers(1, 4), st.floats(0.01, 3.0), st.sampled_from([1, 2, 3]))
@hsettings(max_examples=60, deadline=None)
def test_a_signal_swinging_across_the_surge_level_never_flaps(replicas, share, period):
    """Around the surge level, with any amplitude: it may grow, never shrink back while the signal swings,
    and never faster than the cooldown allows."""
    level = SURGE_FACTOR * 8.0 * replicas
    decisions = simulate(OSCILLATING, swinging(level, share * 8.0 * replicas, period), start=replicas)
    assert all(d.action == "up" for _, d in decisions)
    times = [t for t, _ in decisions]
    assert all(b - a >= OSCILLATING.cooldown_up_seconds for a, b in zip(times, times[1:]))


def test_a_burst_scales_up_at_the_second_look_and_idle_brings_it_back_down_one_at_a_time():
    """A queue at 12× the threshold is a surge: it scales up at the second look (5 s), not after the 20-s window."""
    policy = Rules(min_replicas=1, max_replicas=6, queue_per_instance=8.0, up_window_seconds=20,
                   idle_window_seconds=60, cooldown_up_seconds=30, cooldown_down_seconds=90, max_step=2)
    def burst(t):
        return (100.0, 10.0) if 100 <= t < 400 else (0.0, 0.1)

    decisions = simulate(policy, burst, seconds=1500)
    ups = [d for _, d in decisions if d.action == "up"]
    downs = [d for _, d in decisions if d.action == "down"]
    assert [d.to_serving for d in ups] == [3, 5, 6] and all(d.rule in ("queue", "surge") for d in ups)
    assert (decisions[0][0], ups[0].rule) == (105.0, "surge")
    assert [d.to_serving for d in downs] == [5, 4, 3, 2, 1] and all(d.rule == "idle" for d in downs)


def test_a_queue_over_the_threshold_but_under_the_surge_level_waits_for_the_whole_window():
    policy = Rules(min_replicas=1, max_replicas=6, queue_per_instance=8.0, up_window_seconds=20,
                   idle_window_seconds=60, cooldown_up_seconds=30, cooldown_down_seconds=90, max_step=2)
    decisions = simulate(policy, lambda t: (12.0, 4.0) if 100 <= t < 400 else (0.0, 0.1), seconds=400)
    first_at, first = decisions[0]
    assert 120 <= first_at <= 125 and (first.rule, first.to_serving) == ("queue", 2)  # ceil(1 × 12 / 8)


def test_a_lone_look_at_any_height_is_no_surge():
    policy = Rules(min_replicas=1, max_replicas=6, up_window_seconds=20)
    quiet = [Sample(at=t, serving=1) for t in (0.0, 5.0, 10.0)]
    spike = Sample(at=15.0, serving=1, held=2000.0, gateway_waiting=1000.0)
    assert decide(policy, [*quiet, spike], Situation(now=15.0, serving=1)).action == "hold"
    again = Sample(at=16.0, serving=1, waiting=1000.0)  # a second look, a second later: a surge of 1 s < 2 s
    assert decide(policy, [*quiet, spike, again], Situation(now=16.0, serving=1)).action == "hold"
    third = Sample(at=17.0, serving=1, waiting=1000.0)
    assert decide(policy, [*quiet, spike, again, third], Situation(now=17.0, serving=1)).rule == "surge"


def test_the_gateways_count_stands_for_a_queue_the_engines_have_not_reported_yet():
    """Engines probed before the step say 0 waiting; the gateways hold 40, 36 of them without a first token."""
    policy = Rules(min_replicas=1, max_replicas=8, queue_per_instance=8.0, up_window_seconds=20, max_step=4)
    samples = [Sample(at=t, serving=1, waiting=0.0, running=4.0, held=40.0, gateway_waiting=36.0)
               for t in (0.0, 1.0, 2.0)]
    decision = decide(policy, samples, Situation(now=2.0, serving=1))
    assert (decision.rule, decision.to_serving) == ("surge", 5)  # ceil(1 × 36 / 8) = 5: 4 more, the max step
    assert decision.signals["gateway_waiting"] == 36.0
    engines_only = [Sample(at=t, serving=1, waiting=0.0, running=4.0) for t in (0.0, 1.0, 2.0)]
    assert decide(policy, engines_only, Situation(now=2.0, serving=1)).action == "hold"
    streaming = [Sample(at=t, serving=1, running=4.0, held=40.0, gateway_waiting=0.0) for t in (0.0, 1.0, 2.0)]
    assert decide(policy, streaming, Situation(now=2.0, serving=1)).action == "hold"  # all 40 have their tokens


def test_requests_the_gateways_hold_keep_a_deployment_from_shrinking():
    policy = Rules(min_replicas=0, max_replicas=4, idle_window_seconds=60, zero_after_idle_seconds=60,
                   cooldown_down_seconds=30)
    busy = [Sample(at=t, serving=2, held=6.0) for t in range(0, 125, 5)]  # engines report nothing (a stale probe)
    assert decide(policy, busy, Situation(now=120.0, serving=2)).action == "hold"
    idle = [Sample(at=t, serving=2, held=0.0) for t in range(0, 125, 5)]
    assert decide(policy, idle, Situation(now=120.0, serving=2)).rule == "idle"
    one = [Sample(at=t, serving=1, held=1.0 if t == 60 else 0.0) for t in range(0, 125, 5)]
    assert decide(policy, one, Situation(now=120.0, serving=1)).action == "hold"  # one request held: not zero


def test_the_nudge_level_is_the_surge_level_and_silent_when_no_scale_up_can_follow():
    policy = Rules(min_replicas=1, max_replicas=4, queue_per_instance=8.0, cooldown_up_seconds=60)
    assert nudge_level(policy, Situation(now=100.0, serving=2)) == SURGE_FACTOR * 8.0 * 2
    assert nudge_level(policy, Situation(now=100.0, serving=4)) is None  # at max
    assert nudge_level(policy, Situation(now=100.0, serving=2, last_scale_up_at=70.0)) is None  # cooling
    assert nudge_level(policy, Situation(now=100.0, serving=0)) is None  # asleep: the wake path asks


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


def test_a_quiet_deployment_with_occasional_bursts_comes_down():
    """One developer's burst of 3 every 15 s puts single looks over the mark; the window's mean does not keep
    the deployment large (the rule judged every look over the mark until 2026-12-06, and a quiet phase of bursts
    kept two engines for good)."""
    policy = Rules(min_replicas=1, max_replicas=5, low_water_per_instance=1.5, idle_window_seconds=60,
                   cooldown_down_seconds=90)
    def bursty(t):
        return (0.0, 3.0) if int(t) % 15 == 0 else (0.0, 0.2)

    decisions = simulate(policy, bursty, seconds=1200, start=4)
    assert [d.to_serving for _, d in decisions] == [3, 2, 1] and all(d.rule == "idle" for _, d in decisions)
    assert "on 1" in decisions[-1][1].reason


@given(st.integers(2, 8), st.floats(0.0, 20.0))
@hsettings(max_examples=200, deadline=None)
def test_a_step_down_lands_under_the_mark(serving, load):
    """Down by one only when the window's mean load, spread over the instances that remain, is under the mark."""
    policy = Rules(min_replicas=1, max_replicas=8, low_water_per_instance=1.0, idle_window_seconds=60)
    samples = [Sample(at=t, serving=serving, running=load) for t in range(0, 65, 5)]
    decision = decide(policy, samples, Situation(now=60.0, serving=serving))
    if load / (serving - 1) < 1.0:
        assert (decision.rule, decision.to_serving) == ("idle", serving - 1)
    else:
        assert decision.action == "hold"
