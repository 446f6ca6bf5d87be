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
