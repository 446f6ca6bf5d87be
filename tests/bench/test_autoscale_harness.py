"""The autoscaling benchmark's own arithmetic (the full run takes minutes: `python -m bench autoscale`).

The stand-up spike's shape, "back under the SLO", the promotion timing and the instance-seconds the
table prints, on made-up outcomes and on rows in the test database.
"""
from datetime import timedelta

import pytest

from bench import workload
from bench._autoscale_rows import report
from bench.autoscale import TARGET_TTFT_RATIO, Outcome, Result, back_under_slo, over_target, p95, promotion_seconds

SPEC = workload.StandupSpec()


def test_the_stand_up_spike_steps_up_holds_fades_and_is_the_same_every_time():
    items = workload.generate_standup(SPEC, "m")
    assert items == workload.generate_standup(SPEC, "m")

    def rate(begin, end):
        return sum(1 for i in items if begin <= i.at < end) / (end - begin)

    quiet, held = rate(0, SPEC.step_at), rate(SPEC.step_at, SPEC.step_at + SPEC.hold_seconds)
    after = rate(SPEC.spike_ends, SPEC.seconds)
    assert held > 4 * quiet and held > 4 * after
    assert all(i.body["model"] == "m" and i.body["stream"] for i in items)


def outcomes(ttft_at) -> Result:
    """One request every 0.5 s of the run, with the TTFT `ttft_at(send time)` (None: failed)."""
    times = [n * 0.5 for n in range(int(SPEC.seconds * 2))]
    return Result({"name": "x"}, [Outcome(t, ttft_at(t)) for t in times])


def test_back_under_the_slo_is_the_end_of_the_last_window_over_it_counted_from_the_step():
    step = SPEC.step_at
    assert back_under_slo(outcomes(lambda t: 0.1), SPEC) == 0
    assert back_under_slo(outcomes(lambda t: 3.0 if step <= t < step + 12 else 0.1), SPEC) == 15
    assert back_under_slo(outcomes(lambda t: None if t == step + 31 else 0.1), SPEC) == 35  # a failure counts
    assert back_under_slo(outcomes(lambda t: 3.0 if t >= step else 0.1), SPEC) is None
    assert back_under_slo(outcomes(lambda t: 3.0 if t >= SPEC.spike_ends else 0.1), SPEC) == 0  # quiet: not judged


def test_promotion_time_runs_from_the_decision_to_the_first_token_and_keeps_cold_ones_apart():
    result = Result({"name": "w"}, [], rows={
        "decisions": [{"at": 100.0, "from": 1, "to": 3}, {"at": 200.0, "from": 3, "to": 2}],
        "promotions": [{"at": 100.4, "was_ready": True, "first_served": 101.5},
                       {"at": 100.4, "was_ready": False, "first_served": 121.0},
                       {"at": 300.0, "was_ready": True, "first_served": None}]})
    assert promotion_seconds(result) == [pytest.approx(1.5)]
    assert promotion_seconds(result, warm=False) == [pytest.approx(21.0)]


@pytest.mark.parametrize("requests", [20, 199, 600, 864])
def test_the_count_over_the_target_line_decides_the_p95_target_exactly(requests):
    """The breakdown's allowance is the p95's: one request more over the line and the p95 is over it too."""
    fixed = Result({"name": "fixed-max"}, [Outcome(n * SPEC.seconds / requests, 0.2) for n in range(requests)])
    line = TARGET_TTFT_RATIO * 0.2
    _, allowed = over_target(fixed, fixed, SPEC)
    for slow in (allowed, allowed + 1):
        # the slow ones spread over the run, one in three a failure
        marks = {round(k * requests / max(slow, 1)) % requests for k in range(slow)}
        result = Result({"name": "x"}, [Outcome(o.sent_at, (None if n % 3 == 0 else 0.5) if n in marks else 0.2)
                                        for n, o in enumerate(fixed.outcomes)])
        counts, _ = over_target(result, fixed, SPEC)
        assert sum(counts) == len(marks) == slow
        within = p95([1e9 if o.ttft is None else o.ttft * 1000 for o in result.outcomes]) <= line * 1000
        assert within == (slow <= allowed)


def test_the_count_over_the_target_line_is_split_by_phase():
    fixed = outcomes(lambda t: 0.2)
    slow_at = {10.0, SPEC.step_at + 1, SPEC.step_at + SPEC.hold_seconds + 1, SPEC.spike_ends + 1, SPEC.seconds - 1}
    result = outcomes(lambda t: None if t == 10.0 else 0.4 if t in slow_at else 0.2)
    assert over_target(result, fixed, SPEC)[0] == [1, 1, 1, 2]


@pytest.mark.django_db
def test_the_report_counts_instance_seconds_within_the_run_and_finds_the_promoted_first_token():
    from audit.services import record_event
    from fleet.models import Deployment, Instance, ScalingDecision
    from fleet.transitions import FLEET
    from tests.fleet.conftest import make_version
    from usage.models import UsageEvent

    deployment = Deployment.objects.create(name="auto", model_version=make_version(), runtime_backend="simulator")
    whole = Instance.objects.create(deployment=deployment, state="ready")
    promoted = record_event(actor=FLEET, action="fleet.instance.promote", target=whole).occurred_at  # audit: now
    t0 = promoted - timedelta(seconds=11)
    at = lambda seconds: t0 + timedelta(seconds=seconds)  # noqa: E731
    Instance.objects.filter(pk=whole.pk).update(starting_at=at(-50), ready_at=at(-30))
    Instance.objects.create(deployment=deployment, state="stopped", starting_at=at(20), ready_at=at(40),
                            stopped_at=at(70))
    Instance.objects.create(deployment=deployment, state="pending")  # never launched: costs nothing
    ScalingDecision.objects.create(deployment=deployment, decided_at=at(10), rule="queue", action="up",
                                   from_serving=1, to_serving=2, signals={}, reason="")
    UsageEvent.objects.create(request_id="r1", occurred_at=at(13), instance_id=whole.pk, status_code=200,
                              outcome="ok", latency_ms=1500, ttft_ms=500)
    found = report(at(0).timestamp(), at(100).timestamp())["auto"]
    assert found["instance_seconds"] == pytest.approx(100 + 50)  # clipped to the run; the stopped one's 50 s
    assert found["decisions"] == [{"at": at(10).timestamp(), "rule": "queue", "from": 1, "to": 2}]
    assert found["promotions"] == [{"at": at(11).timestamp(), "instance": whole.pk, "was_ready": True,
                                    "first_served": pytest.approx(at(12).timestamp())}]
