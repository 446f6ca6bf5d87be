"""Rollups equal a direct aggregate over raw events, whatever order hours are rolled up in and however
often they are re-run, including after late events arrive."""
from collections import Counter, defaultdict
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.usage.events import BASE, event
from usage import histograms
from usage.models import CompletionFeedback, CostRollup, Granularity, Outcome, RollupRun, UsageEvent, UsageRollup
from usage.rollups import roll_up_day, roll_up_hours
from usage.services import record_usage_batch

HOURS = 26  # spans two days
NOW = BASE + timedelta(days=3)
COUNTED = ("requests", *Outcome.values, "prompt_tokens", "completion_tokens", "cached_tokens", "ttft_count",
           "fallbacks", "cache_hits", "feedback_accepted", "feedback_ignored")

raw_event = st.fixed_dictionaries({
    "second": st.integers(0, HOURS * 3600 - 1),
    "tenant": st.sampled_from([0, 1, None]),
    "model_version_id": st.sampled_from([None, 7, 8]),
    "api_key_prefix": st.sampled_from(["", "sy_a", "sy_b"]),
    "outcome": st.sampled_from(Outcome.values),
    "prompt_tokens": st.integers(0, 5000),
    "cached_share": st.floats(0, 1),
    "completion_tokens": st.integers(0, 2000),
    "ttft_ms": st.none() | st.floats(0, 90_000),
    "latency_ms": st.floats(0, 120_000),
    "cache_hit": st.booleans(),
    "fallback_used": st.booleans(),
    "feedback": st.sampled_from([None, True, False]),
    "late": st.booleans(),
})


def _insert(specs, tenants):
    batch = []
    for spec in specs:
        tenant = None if spec["tenant"] is None else tenants[spec["tenant"]]
        fields = {k: spec[k] for k in ("model_version_id", "api_key_prefix", "outcome", "prompt_tokens",
                                       "completion_tokens", "ttft_ms", "latency_ms", "cache_hit", "fallback_used")}
        fields["cached_tokens"] = int(spec["prompt_tokens"] * spec["cached_share"])
        row = event(tenant, BASE + timedelta(seconds=spec["second"]), **fields)
        batch.append(row)
        if spec["feedback"] is not None and tenant is not None:
            CompletionFeedback.objects.create(request_id=row["request_id"], tenant=tenant, accepted=spec["feedback"],
                                              recorded_at=NOW)
    record_usage_batch(batch)


def _direct() -> tuple[dict, dict, list]:
    """Totals per (tenant, model version, key) straight from raw events, plus overall histograms."""
    feedback = dict(CompletionFeedback.objects.values_list("request_id", "accepted"))
    totals, floats = defaultdict(Counter), defaultdict(float)
    ttft, latency = histograms.empty(), histograms.empty()
    for e in UsageEvent.objects.all():
        key = (e.tenant_id, e.model_version_id, e.api_key_prefix)
        t = totals[key]
        t.update({"requests": 1, e.outcome: 1, "prompt_tokens": e.prompt_tokens, "cached_tokens": e.cached_tokens,
                  "completion_tokens": e.completion_tokens, "ttft_count": e.ttft_ms is not None,
                  "fallbacks": e.fallback_used, "cache_hits": e.cache_hit,
                  "feedback_accepted": feedback.get(e.request_id) is True,
                  "feedback_ignored": feedback.get(e.request_id) is False})
        floats[key] += e.latency_ms
        latency[histograms.bucket_of(e.latency_ms)] += 1
        if e.ttft_ms is not None:
            ttft[histograms.bucket_of(e.ttft_ms)] += 1
    return {k: {name: v[name] for name in COUNTED} for k, v in totals.items()}, floats, [ttft, latency]


def _from_rollups(granularity) -> tuple[dict, dict, list]:
    totals, floats = defaultdict(Counter), defaultdict(float)
    rows = list(UsageRollup.objects.filter(granularity=granularity))
    for row in rows:
        key = (row.tenant_id, row.model_version_id, row.api_key_prefix)
        totals[key].update({name: getattr(row, name) for name in COUNTED})
        floats[key] += row.latency_sum_ms
    hists = [histograms.merge(r.ttft_histogram for r in rows), histograms.merge(r.latency_histogram for r in rows)]
    return {k: {name: v[name] for name in COUNTED} for k, v in totals.items()}, floats, hists


def _reset():
    for model in (UsageEvent, UsageRollup, CostRollup, RollupRun, CompletionFeedback):
        model.objects.all().delete()


def _roll(hour_order):
    for index in hour_order:
        start = BASE + timedelta(hours=index)
        roll_up_hours(start, start + timedelta(hours=1), now=NOW)


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(raw_event, max_size=60),
       first_pass=st.lists(st.integers(0, HOURS - 1), max_size=12),
       order=st.permutations(list(range(HOURS))), repeats=st.lists(st.integers(0, HOURS - 1), max_size=6))
def test_rollups_match_raw_events_in_any_order(tenant_a, tenant_b, specs, first_pass, order, repeats):
    _reset()
    _insert([s for s in specs if not s["late"]], [tenant_a, tenant_b])
    _roll(first_pass)  # some hours rolled up before the late events arrive, maybe several times
    _insert([s for s in specs if s["late"]], [tenant_a, tenant_b])
    _roll(order + repeats)  # then every hour, in any order, some more than once
    for day in (BASE, BASE + timedelta(days=1), BASE):
        roll_up_day(day, now=NOW)

    expected, expected_latency, expected_hists = _direct()
    for granularity in (Granularity.HOUR, Granularity.DAY):
        counted, latency, hists = _from_rollups(granularity)
        assert {k: v for k, v in counted.items() if v["requests"]} == expected
        assert hists == expected_hists
        assert latency.keys() == expected_latency.keys()
        for key, value in expected_latency.items():
            assert latency[key] == pytest.approx(value)


def test_rerunning_an_hour_replaces_its_rows_instead_of_adding(tenant_a):
    record_usage_batch([event(tenant_a, BASE + timedelta(minutes=m)) for m in range(5)])
    for _ in range(3):
        roll_up_hours(BASE, BASE + timedelta(hours=1), now=NOW)
    row = UsageRollup.objects.get(granularity=Granularity.HOUR)
    assert (row.requests, row.prompt_tokens, row.completion_tokens) == (5, 500, 100)
    assert RollupRun.objects.get(granularity=Granularity.HOUR).events == 5
