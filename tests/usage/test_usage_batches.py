"""Usage batches are written exactly once, even when a batch is sent again."""
from django.utils import timezone

from usage.models import Outcome, UsageEvent
from usage.services import record_usage_batch


def _event(request_id: str, tenant, tokens: int) -> dict:
    return {"request_id": request_id, "occurred_at": timezone.now(), "tenant": tenant, "status_code": 200,
            "outcome": Outcome.OK, "prompt_tokens": tokens, "completion_tokens": tokens, "latency_ms": 12.5}


def test_resent_batch_is_not_double_counted(tenant_a):
    batch = [_event(f"req-{i}", tenant_a, 10) for i in range(5)]
    assert record_usage_batch(batch) == 5
    assert record_usage_batch(batch + [_event("req-new", tenant_a, 7)]) == 1
    assert UsageEvent.objects.count() == 6
    assert sum(UsageEvent.objects.values_list("prompt_tokens", flat=True)) == 57


def test_a_request_id_twice_in_one_batch_is_stored_once(tenant_a):
    first, again = _event("req-dup", tenant_a, 10), _event("req-dup", tenant_a, 99)
    assert record_usage_batch([first, again, _event("req-other", tenant_a, 1)]) == 2
    assert UsageEvent.objects.get(request_id="req-dup").prompt_tokens == 10


def test_every_field_round_trips_and_cached_tokens_never_exceed_prompt(tenant_a):
    event = {**_event("req-full", tenant_a, 40), "cached_tokens": 75, "ttft_ms": None, "cache_hit": True,
             "streamed": True, "api_key_prefix": "sy_live_abcd", "model_name": "tiny-coder", "redactions": 2,
             "redacted_prompt": "def f(): [REDACTED:aws_access_key]"}
    assert record_usage_batch([event]) == 1
    stored = UsageEvent.objects.get(request_id="req-full")
    assert (stored.tenant_id, stored.prompt_tokens, stored.cached_tokens, stored.ttft_ms) == (tenant_a.id, 40, 40, None)
    assert (stored.cache_hit, stored.streamed, stored.fallback_used) == (True, True, False)
    assert (stored.api_key_prefix, stored.model_name, stored.redactions) == ("sy_live_abcd", "tiny-coder", 2)
    assert stored.redacted_prompt == "def f(): [REDACTED:aws_access_key]"
    assert abs((stored.occurred_at - event["occurred_at"]).total_seconds()) < 0.001
