"""Gate evaluation is a pure function of the two versions' figures: examples for every gate, and properties."""
from hypothesis import given
from hypothesis import strategies as st

from rollouts.gates import Figures, Gates, Observation, Verdict, evaluate

GATES = Gates(max_error_rate=0.05, error_rate_ratio=2.0, error_rate_margin=0.01, ttft_p95_ratio=1.2,
              ttft_p95_margin_ms=50.0, min_requests=50)
HEALTHY_OLD = Figures(requests=900, errors=9, ttft_p95_ms=100.0)


def judge(new: Figures, old: Figures = HEALTHY_OLD, **seen) -> tuple[str, tuple[str, ...]]:
    result = evaluate(GATES, Observation(new=new, old=old, **seen))
    return result.verdict, result.failed


def test_a_healthy_new_version_waits_out_its_bake_then_passes():
    new = Figures(requests=100, errors=1, ttft_p95_ms=105.0)
    assert judge(new) == (Verdict.WAIT, ())
    assert judge(new, baked=True) == (Verdict.PASS, ())


def test_nothing_is_judged_before_the_minimum_request_count():
    assert judge(Figures(requests=49, errors=49)) == (Verdict.WAIT, ())
    assert judge(Figures(requests=49), baked=True) == (Verdict.WAIT, ())  # the data timeout is not over
    assert judge(Figures(requests=49), baked=True, overdue=True) == (Verdict.INSUFFICIENT, ())


def test_twenty_percent_errors_fail_the_ceiling_at_once_without_waiting_for_the_bake():
    verdict, failed = judge(Figures(requests=50, errors=10, ttft_p95_ms=100.0))
    assert verdict == Verdict.FAIL and "error_rate" in failed


def test_errors_under_the_ceiling_but_well_over_the_old_versions_fail_the_relative_gate():
    verdict, failed = judge(Figures(requests=100, errors=4, ttft_p95_ms=100.0))  # 4 % vs 1 % × 2 + 1 %
    assert (verdict, failed) == (Verdict.FAIL, ("error_rate_vs_old",))


def test_a_three_times_slower_first_token_fails_the_ttft_gate():
    verdict, failed = judge(Figures(requests=60, ttft_p95_ms=300.0))
    assert (verdict, failed) == (Verdict.FAIL, ("ttft_p95_vs_old",))


def test_milliseconds_of_noise_on_a_fast_model_are_not_a_slower_version():
    fast_old = Figures(requests=900, ttft_p95_ms=5.0)
    assert judge(Figures(requests=60, ttft_p95_ms=14.0), old=fast_old, baked=True) == (Verdict.PASS, ())
    assert judge(Figures(requests=60, ttft_p95_ms=70.0), old=fast_old)[1] == ("ttft_p95_vs_old",)


def test_without_old_traffic_the_baseline_is_the_reference_and_without_either_only_the_ceiling_counts():
    slow = Figures(requests=60, ttft_p95_ms=300.0)
    assert judge(slow, old=Figures(), old_baseline=HEALTHY_OLD)[0] == Verdict.FAIL
    assert judge(slow, old=Figures(), baked=True) == (Verdict.PASS, ())


def test_a_failed_engine_of_the_new_version_fails_engine_health_whatever_the_figures():
    assert judge(Figures(), failed_engines=1) == (Verdict.FAIL, ("engine_health",))


def test_a_gate_with_no_minimum_passes_once_baked_even_without_traffic():
    result = evaluate(Gates(min_requests=0), Observation(new=Figures(), old=Figures(), baked=True))
    assert result.verdict == Verdict.PASS


figures = st.builds(lambda n, e, t: Figures(requests=n, errors=min(e, n), ttft_p95_ms=t),
                    st.integers(0, 5000), st.integers(0, 5000), st.none() | st.floats(1, 10_000))


@given(new=figures, old=figures, baked=st.booleans(), failed=st.integers(0, 3))
def test_a_pass_means_every_threshold_holds_and_enough_was_seen(new, old, baked, failed):
    result = evaluate(GATES, Observation(new=new, old=old, baked=baked, failed_engines=failed))
    if result.verdict == Verdict.PASS:
        assert baked and failed == 0 and new.requests >= GATES.min_requests
        assert new.error_rate <= GATES.max_error_rate
        if old.requests >= GATES.min_requests:
            assert new.error_rate <= old.error_rate * GATES.error_rate_ratio + GATES.error_rate_margin
            if old.ttft_p95_ms and new.ttft_p95_ms:
                assert new.ttft_p95_ms <= old.ttft_p95_ms * GATES.ttft_p95_ratio + GATES.ttft_p95_margin_ms
    if result.verdict == Verdict.FAIL:
        assert result.failed and len(result.failed) == len(result.reasons)
    if failed == 0 and new.requests < GATES.min_requests:
        assert result.verdict in (Verdict.WAIT, Verdict.INSUFFICIENT)


@given(new=figures, old=figures)
def test_the_bake_only_turns_a_wait_into_a_pass_or_insufficient(new, old):
    waiting = evaluate(GATES, Observation(new=new, old=old))
    baked = evaluate(GATES, Observation(new=new, old=old, baked=True, overdue=True))
    assert waiting.verdict in (Verdict.WAIT, Verdict.FAIL)
    if waiting.verdict == Verdict.FAIL:
        assert baked.verdict == Verdict.FAIL and baked.failed == waiting.failed
    else:
        assert baked.verdict in (Verdict.PASS, Verdict.INSUFFICIENT)
