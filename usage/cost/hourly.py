"""One hour's cost rows: instance spans × prices, shared out by `allocation`."""
import logging
from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from usage.cost.allocation import CostShare, InstanceHour, allocate, busy_seconds, micro
from usage.cost.capacity import InstanceSpan, instance_spans
from usage.cost.prices import PriceHistory
from usage.models import UsageEvent
from usage.periods import HOUR, floor_hour, periods
from usage.work import engine_work

logger = logging.getLogger(__name__)


def hour_shares(hour_start: datetime, now: datetime) -> list[CostShare]:
    """Cost shares of every instance that was up in the hour starting at `hour_start` (up to `now`)."""
    return range_shares(hour_start, hour_start + HOUR, now).get(hour_start, [])


def range_shares(start: datetime, end: datetime, now: datetime) -> dict[datetime, list[CostShare]]:
    """Cost shares per hour of [start, end): instances, prices and requests fetched once for the range."""
    spans = instance_spans(start, min(end, now))
    if not spans:
        return {}
    served = served_requests(start, end, [span.instance_id for span in spans])
    warm = warm_intervals(start, end, [span.instance_id for span in spans])
    prices = PriceHistory()
    shares: dict[datetime, list[CostShare]] = {}
    for hour in (hour for hour in periods(start, end, HOUR) if hour < now):
        hour_end = min(hour + HOUR, now)
        table = prices.at(hour)
        for span in spans:
            window = (max(span.up_from, hour), min(span.up_to or hour_end, hour_end))
            if window[1] > window[0]:
                work = served.get((hour, span.instance_id), ([], {}))
                warm_seconds = busy_seconds(warm.get(span.instance_id, []), window[0].timestamp(),
                                            window[1].timestamp())
                shares.setdefault(hour, []).extend(allocate(instance_hour(span, window, table, work, warm_seconds)))
    return shares


def instance_hour(span: InstanceSpan, window, prices: dict, served, warm_seconds: float = 0.0) -> InstanceHour:
    """The instance's GPU-seconds and cost inside `window`, with the busy time and work of its requests."""
    intervals, work = served
    up_seconds = (window[1] - window[0]).total_seconds()
    gpu_seconds = micro(Decimal(repr(up_seconds)) * span.units)
    price = prices.get(span.resource)
    if price is None:
        logger.warning("no price for %s: instance %s counted at $0", span.resource, span.instance_id)
    cost = micro(gpu_seconds * (price or Decimal(0)) / 3600)
    busy = busy_seconds(intervals, window[0].timestamp(), window[1].timestamp())
    return InstanceHour(deployment_id=span.deployment_id, owner_tenant_id=span.owner_tenant_id,
                        model_version_id=span.model_version_id, quantization=span.quantization,
                        gpu_seconds=gpu_seconds, cost_usd=cost, up_seconds=up_seconds, busy_seconds=busy,
                        work_by_tenant=work, unit=span.unit, warm_seconds=warm_seconds)


def warm_intervals(start: datetime, end: datetime, instance_ids: list[int]) -> dict[int, list[tuple[float, float]]]:
    """Instance id → the [start, end) epoch intervals it spent warm, overlapping [start, end)."""
    from django.apps import apps
    from django.db.models import Q

    if not apps.is_installed("fleet"):
        return {}
    spans = apps.get_model("fleet", "WarmSpan").objects.filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=start), instance_id__in=instance_ids, started_at__lt=end)
    found: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for instance_id, began, ended in spans.values_list("instance_id", "started_at", "ended_at"):
        found[instance_id].append((began.timestamp(), (ended or end).timestamp()))
    return found


def served_requests(start: datetime, end: datetime, instance_ids: list[int]) -> dict:
    """(hour, instance id) → (request intervals in epoch seconds, engine work by tenant), by finishing hour."""
    served: dict = defaultdict(lambda: ([], defaultdict(float)))
    rows = UsageEvent.objects.filter(occurred_at__gte=start, occurred_at__lt=end, instance_id__in=instance_ids)
    for instance_id, tenant_id, finished, latency_ms, prompt, cached, completion in rows.values_list(
            "instance_id", "tenant_id", "occurred_at", "latency_ms", "prompt_tokens", "cached_tokens",
            "completion_tokens").iterator(chunk_size=5000):
        intervals, work = served[(floor_hour(finished), instance_id)]
        end_s = finished.timestamp()
        intervals.append((end_s - latency_ms / 1000.0, end_s))
        work[tenant_id] += engine_work(prompt, cached, completion)
    return served


def merge_shares(shares: list[CostShare]) -> dict[tuple, dict]:
    """Sum shares per (tenant, model version, quantization, deployment, kind, unit)."""
    merged: dict[tuple, dict] = {}
    for share in shares:
        key = (share.tenant_id, share.model_version_id, share.quantization, share.deployment_id, share.kind,
               share.unit)
        row = merged.setdefault(key, {"gpu_seconds": Decimal(0), "cost_usd": Decimal(0), "engine_work": 0.0})
        row["gpu_seconds"] += share.gpu_seconds
        row["cost_usd"] += share.cost_usd
        row["engine_work"] += share.engine_work
    return merged
