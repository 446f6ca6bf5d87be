"""Fixed-bucket latency histograms: summable across hours, tenants and keys; percentiles by interpolation."""
from bisect import bisect_right
from collections.abc import Iterable

# Upper bounds in milliseconds; bucket i holds values in [BOUNDS_MS[i-1], BOUNDS_MS[i]), the last one
# everything from 60 s up. Fixed forever: changing them would make stored histograms unsummable.
BOUNDS_MS = (25, 50, 100, 150, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 7500, 10000, 20000, 30000, 60000)
BUCKETS = len(BOUNDS_MS) + 1


def bucket_ranges() -> list[tuple[float | None, float | None]]:
    """(lower inclusive, upper exclusive) of every bucket; None = unbounded."""
    lowers = (None, *BOUNDS_MS)
    uppers = (*BOUNDS_MS, None)
    return list(zip(lowers, uppers))


def bucket_of(value_ms: float) -> int:
    return bisect_right(BOUNDS_MS, value_ms)


def empty() -> list[int]:
    return [0] * BUCKETS


def merge(histograms: Iterable[list[int]]) -> list[int]:
    """Element-wise sum; an empty list (no data) counts as all zeros."""
    total = empty()
    for histogram in histograms:
        for index, count in enumerate(histogram or ()):
            total[index] += count
    return total


def add_into(total: list[int], histogram: list[int]) -> None:
    """total += histogram, in place (the hot loop of every chart: no new lists)."""
    if histogram:
        total[:] = map(int.__add__, total, histogram)


def percentile(histogram: list[int], q: float) -> float | None:
    """The q-quantile (0 < q ≤ 1), interpolated linearly inside its bucket; None without data.

    The open last bucket has no upper bound, so a quantile falling there reads as its lower bound (60 s).
    """
    total = sum(histogram)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(histogram):
        if count and seen + count >= rank:
            return _interpolate(index, (rank - seen) / count)
        seen += count
    return float(BOUNDS_MS[-1])


def _interpolate(index: int, fraction: float) -> float:
    lower = 0.0 if index == 0 else float(BOUNDS_MS[index - 1])
    if index == len(BOUNDS_MS):
        return lower
    return lower + (BOUNDS_MS[index] - lower) * fraction


SUMMARY_QUANTILES = (0.5, 0.95, 0.99)


def summary(histogram: list[int]) -> dict:
    """p50 / p95 / p99 of one histogram, in milliseconds: `percentile` of each, in one pass over the buckets.

    A month of hourly points is ~750 histograms × 2 per chart, so three passes each showed in profiles.
    """
    names = [f"p{int(q * 100)}" for q in SUMMARY_QUANTILES]
    total = sum(histogram)
    if total == 0:
        return dict.fromkeys(names)
    ranks = [q * total for q in SUMMARY_QUANTILES]  # ascending, so each is found at or after the previous
    found: dict[str, float] = {}
    seen = 0
    for index, count in enumerate(histogram):
        while count and len(found) < len(ranks) and seen + count >= ranks[len(found)]:
            found[names[len(found)]] = _interpolate(index, (ranks[len(found)] - seen) / count)
        seen += count
    return {name: found.get(name, float(BOUNDS_MS[-1])) for name in names}
