"""Usage and cost for the console, read from the hourly/daily rollups the usage app computes."""
from collections import defaultdict
from decimal import Decimal

from django.db.models import Sum
from django.db.models.functions import Coalesce

from console.stats import scope_filter
from console.timerange import TimeRange
from models_registry.models import ModelVersion
from tenants.models import Tenant
from usage.models import CostKind, CostRollup, Granularity, UsageRollup

USAGE_SUMS = ("requests", "ok", "client_error", "rate_limited", "upstream_error", "timeout", "prompt_tokens",
              "completion_tokens", "cached_tokens", "ttft_count", "ttft_sum_ms", "feedback_accepted",
              "feedback_ignored")
CSV_COLUMNS = ("tenant", "model_version", "requests", "ok", "errors", "prompt_tokens", "completion_tokens",
               "cached_tokens", "avg_ttft_ms", "gpu_seconds", "usage_cost_usd", "idle_cost_usd",
               "cost_per_completion_usd", "accepted_share")


def granularity(tr: TimeRange) -> str:
    return Granularity.DAY if tr.unit == "day" else Granularity.HOUR


def _window(model, tenant_ids, tr: TimeRange):
    return model.objects.filter(scope_filter(tenant_ids), granularity=granularity(tr),
                                period_start__gte=tr.start, period_start__lt=tr.end)


def _bucketed(rows, tr: TimeRange, value: str) -> list[tuple]:
    found = {row["period_start"]: row[value] or 0 for row in rows}
    return [(bucket, float(found.get(bucket, 0))) for bucket in tr.buckets()]


def time_series(tenant_ids, tr: TimeRange) -> dict[str, list[tuple]]:
    """Requests, tokens and cost per bucket of the range."""
    usage = (_window(UsageRollup, tenant_ids, tr).values("period_start")
             .annotate(requests=Sum("requests"), tokens=Sum("prompt_tokens") + Sum("completion_tokens")).order_by())
    cost = _window(CostRollup, tenant_ids, tr).values("period_start").annotate(cost=Sum("cost_usd")).order_by()
    usage, cost = list(usage), list(cost)
    return {"requests": _bucketed(usage, tr, "requests"), "tokens": _bucketed(usage, tr, "tokens"),
            "cost": _bucketed(cost, tr, "cost")}


def breakdown(tenant_ids, tr: TimeRange) -> list[dict]:
    """One row per tenant × model version: usage, latency, GPU time and cost."""
    rows: dict[tuple, dict] = defaultdict(lambda: {name: 0 for name in USAGE_SUMS} | _zero_cost())
    for row in _window(UsageRollup, tenant_ids, tr).values("tenant_id", "model_version_id").annotate(
            **{name: Sum(name) for name in USAGE_SUMS}).order_by():
        rows[(row.pop("tenant_id"), row.pop("model_version_id"))].update(row)
    for row in _window(CostRollup, tenant_ids, tr).values("tenant_id", "model_version_id", "kind").annotate(
            gpu=Coalesce(Sum("gpu_seconds"), Decimal(0)), cost=Coalesce(Sum("cost_usd"), Decimal(0))).order_by():
        target = rows[(row["tenant_id"], row["model_version_id"])]
        target["gpu_seconds"] += row["gpu"]
        target["idle_cost" if row["kind"] == CostKind.IDLE else "usage_cost"] += row["cost"]
    return _labelled([_derived(key, values) for key, values in rows.items()])


def _zero_cost() -> dict:
    return {"gpu_seconds": Decimal(0), "usage_cost": Decimal(0), "idle_cost": Decimal(0)}


def _derived(key: tuple, row: dict) -> dict:
    errors = row["upstream_error"] + row["timeout"]
    feedback = row["feedback_accepted"] + row["feedback_ignored"]
    cost = row["usage_cost"] + row["idle_cost"]
    return {**row, "tenant_id": key[0], "model_version_id": key[1], "errors": errors,
            "avg_ttft_ms": row["ttft_sum_ms"] / row["ttft_count"] if row["ttft_count"] else None,
            "cost": cost, "cost_per_completion": cost / row["ok"] if row["ok"] else None,
            "accepted_share": row["feedback_accepted"] / feedback if feedback else None}


def _labelled(rows: list[dict]) -> list[dict]:
    slugs = dict(Tenant.objects.filter(pk__in={r["tenant_id"] for r in rows}).values_list("pk", "slug"))
    versions = {v.pk: str(v) for v in ModelVersion.objects.select_related("model").filter(
        pk__in={r["model_version_id"] for r in rows})}
    for row in rows:
        row["tenant"] = slugs.get(row["tenant_id"], "(unallocated)" if row["tenant_id"] is None else "(deleted)")
        row["model_version"] = versions.get(row["model_version_id"], "—")
    return sorted(rows, key=lambda r: (-r["cost"], -r["requests"], r["tenant"]))


def totals(rows: list[dict]) -> dict:
    keys = ("requests", "ok", "errors", "prompt_tokens", "completion_tokens", "cost", "gpu_seconds")
    summed = {key: sum((row[key] for row in rows), Decimal(0) if key in ("cost", "gpu_seconds") else 0) for key in keys}
    summed["cost_per_completion"] = summed["cost"] / summed["ok"] if summed["ok"] else None
    return summed


def csv_row(row: dict) -> list:
    values = {**row, "usage_cost_usd": row["usage_cost"], "idle_cost_usd": row["idle_cost"],
              "cost_per_completion_usd": row["cost_per_completion"]}
    return ["" if values[name] is None else values[name] for name in CSV_COLUMNS]
