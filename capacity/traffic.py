"""A traffic profile derived from this install's own usage records (a tenant's, or a deployment's).

Each usage event ran during [occurred_at − latency, occurred_at] (docs/usage-and-cost.md), so the
number of requests in flight at any moment is a sweep over those intervals. The profile takes the
time-weighted p99 of it over the span that had traffic, the peak, the mean request size and the
number of completions in the window, scaled to a month.
"""
from dataclasses import dataclass
from datetime import datetime, timedelta

from capacity.planner import Traffic

DAYS_PER_MONTH = 30.4
MAX_EVENTS = 1_000_000  # newest first beyond this; a week of a busy install, read as three columns


@dataclass(frozen=True)
class Concurrency:
    peak: int
    p99: float
    busy_seconds: float
    span_seconds: float


def concurrency(intervals: list[tuple[float, float]], quantile: float = 0.99) -> Concurrency:
    """Time-weighted quantile and peak of overlapping intervals (start, end) in seconds."""
    if not intervals:
        return Concurrency(peak=0, p99=0.0, busy_seconds=0.0, span_seconds=0.0)
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    time_at: dict[int, float] = {}
    level, previous, peak = 0, edges[0][0], 0
    for moment, step in edges:
        time_at[level] = time_at.get(level, 0.0) + (moment - previous)
        level, previous = level + step, moment
        peak = max(peak, level)
    span = edges[-1][0] - edges[0][0]
    return Concurrency(peak=peak, p99=_quantile(time_at, span, quantile), busy_seconds=span - time_at.get(0, 0.0),
                       span_seconds=span)


def _quantile(time_at: dict[int, float], span: float, quantile: float) -> float:
    if span <= 0:
        return float(max(time_at, default=0))
    covered = 0.0
    for level in sorted(time_at):
        covered += time_at[level]
        if covered >= quantile * span:
            return float(level)
    return float(max(time_at))


def profile(events: list[tuple[datetime, float, int, int, str]], *, window: timedelta, developers: int | None,
            label: str) -> Traffic:
    """A Traffic of events (finished at, latency ms, prompt tokens, completion tokens, who)."""
    intervals = [(end.timestamp() - max(latency, 0.0) / 1000, end.timestamp()) for end, latency, *_ in events]
    seen = concurrency(intervals)
    count = len(events)
    who = {event[4] for event in events if event[4]}
    scale = DAYS_PER_MONTH / max(window.total_seconds() / 86400, 1e-9)
    return Traffic(
        developers=developers if developers is not None else len(who), peak_concurrency=seen.p99,
        prompt_tokens=round(sum(e[2] for e in events) / count) if count else 0,
        completion_tokens=round(sum(e[3] for e in events) / count) if count else 0,
        completions_per_month=round(count * scale),
        source=(f"usage history of {label}: {count} requests in {window.days or window.total_seconds() / 3600:g} "
                f"{'days' if window.days else 'hours'}, p99 {seen.p99:g} / peak {seen.peak} in flight"))


def usage_events(*, since: datetime, tenant_ids: list[int] | None = None, instance_ids: list[int] | None = None):
    """The completed requests since `since` as (finished at, latency ms, prompt, completion, user or key)."""
    from usage.models import Outcome, UsageEvent

    rows = UsageEvent.objects.filter(occurred_at__gte=since, outcome=Outcome.OK)
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=tenant_ids)
    if instance_ids is not None:
        rows = rows.filter(instance_id__in=instance_ids)
    columns = rows.order_by("-occurred_at").values_list("occurred_at", "latency_ms", "prompt_tokens",
                                                        "completion_tokens", "user_id", "api_key_prefix")
    return [(end, latency, prompt, completion, _who(user, key))
            for end, latency, prompt, completion, user, key in columns[:MAX_EVENTS].iterator(chunk_size=10_000)]


def _who(user_id: int | None, key_prefix: str) -> str:
    """A developer: the user behind the key, else the key itself (a service key counts as one)."""
    if user_id is not None:
        return f"user:{user_id}"
    return f"key:{key_prefix}" if key_prefix else ""
