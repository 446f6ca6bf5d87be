"""Usage and cost for the console, through the usage app's selectors (usage/selectors.py)."""
from decimal import Decimal

from console.timerange import TimeRange
from usage import selectors
from usage.models import Granularity

COST_COLUMNS = ("tenant", "completions", "tokens", "gpu_hours", "cpu_core_hours", "usage_cost_usd", "idle_cost_usd",
                "total_cost_usd", "cost_per_completion_usd", "total_cost_per_completion_usd", "cost_per_1k_tokens_usd",
                "total_cost_per_1k_tokens_usd", "acceptance_ratio")


def query(tenant_ids, tr: TimeRange) -> selectors.UsageQuery:
    """`tenant_ids` None reads every tenant (platform admins), tenant-less rows included."""
    granularity = Granularity.DAY if tr.unit == "day" else Granularity.HOUR
    return selectors.UsageQuery(tenant_ids=tenant_ids, since=tr.start, until=tr.end, granularity=granularity)


def series(q: selectors.UsageQuery, tr: TimeRange) -> dict[str, list[tuple]]:
    """Requests and tokens per bucket of the range, zero where the rollups have no row."""
    points = {p["period_start"]: p for p in selectors.time_series(q, latency=False)}  # charts show no latency
    zero = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
    rows = [(bucket, points.get(bucket, zero)) for bucket in tr.buckets()]
    return {"requests": [(b, float(p["requests"])) for b, p in rows],
            "tokens": [(b, float(p["prompt_tokens"] + p["completion_tokens"])) for b, p in rows]}


def cost_per_day(q: selectors.UsageQuery) -> list[tuple[str, float]]:
    return [(row["day"], float(row["total_cost_usd"])) for row in selectors.cost_table(q, "day") if row["day"]]


def cost_by_tenant(q: selectors.UsageQuery) -> list[dict]:
    rows = selectors.cost_table(q, "tenant")
    for row in rows:
        row["tenant"] = row["tenant"]["slug"] or "(deleted)"
    return sorted(rows, key=lambda r: (-float(r["total_cost_usd"]), r["tenant"]))


def held_units(rows: list[dict]) -> dict[str, bool]:
    """Which compute columns the cost table needs: GPU-hours, CPU core-hours (a CPU-only host has no GPU-hours)."""
    cpu = any(Decimal(row["cpu_core_hours"]) for row in rows)
    return {"gpu": any(Decimal(row["gpu_hours"]) for row in rows) or not cpu, "cpu": cpu}


def usage_by_model(q: selectors.UsageQuery) -> list[dict]:
    rows = selectors.breakdown(q, "model_version")
    for row in rows:
        row["model_version"] = row["model_version"]["name"] or "(unknown)"
    return sorted(rows, key=lambda r: -r["requests"])


def csv_rows(rows: list[dict]) -> list[list]:
    return [list(COST_COLUMNS)] + [["" if row[c] is None else row[c] for c in COST_COLUMNS] for row in rows]
