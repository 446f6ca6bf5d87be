"""Building raw usage events for the usage suites."""
import itertools
from datetime import datetime, timedelta, timezone

from usage.models import Outcome

BASE = datetime(2026, 1, 5, tzinfo=timezone.utc)  # a Monday, 00:00 UTC
_ids = itertools.count(1)


def event(tenant, at: datetime, **fields) -> dict:
    """One request's usage (defaults: a completed 100 + 20 token completion)."""
    values = {"request_id": f"req-{next(_ids)}", "occurred_at": at, "tenant": tenant, "status_code": 200,
              "outcome": Outcome.OK, "prompt_tokens": 100, "completion_tokens": 20, "latency_ms": 400.0,
              "ttft_ms": 80.0}
    values.update(fields)
    return values


def at(hours: float = 0, minutes: float = 0, seconds: float = 0) -> datetime:
    return BASE + timedelta(hours=hours, minutes=minutes, seconds=seconds)
