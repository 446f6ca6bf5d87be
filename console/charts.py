"""Server-side SVG charts: no script, no CDN, colours from console.css classes (CSP allows no inline style).

Each chart is an `<svg role="img">` with a title and a text description; the page shows the same
numbers in a table for screen readers and for copying.
"""
import itertools
import math
from datetime import datetime

from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 28
_ids = itertools.count(1)


def nice_max(value: float, ticks: int = 4) -> float:
    """A round axis maximum at or above `value` whose `ticks` gridlines fall on round numbers."""
    if value <= 0:
        return 1.0
    raw_step = value / ticks
    power = 10 ** math.floor(math.log10(raw_step))
    return ticks * next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= raw_step)


def short_number(value: float) -> str:
    """12, 2.5k, 1.2M, 0.00064: axis and bar labels."""
    if abs(value) >= 1_000_000:
        return f"{value / 1_000_000:.3g}M"
    if abs(value) >= 1000:
        return f"{value / 1000:.3g}k"
    if value == int(value):
        return f"{int(value)}"
    return f"{value:.3g}" if abs(value) >= 0.01 else f"{value:.6f}".rstrip("0")


def _frame(title: str, description: str, body) -> str:
    ident = f"chart-{next(_ids)}"
    return format_html(
        '<svg class="chart" viewBox="0 0 {} {}" role="img" aria-labelledby="{}-t {}-d" focusable="false">'
        '<title id="{}-t">{}</title><desc id="{}-d">{}</desc>{}</svg>',
        WIDTH, HEIGHT, ident, ident, ident, title, ident, description, body)


def _y_grid(top_value: float) -> str:
    rows = []
    for index in range(5):
        value = top_value * index / 4
        y = _y(value, top_value)
        rows.append((LEFT, f"{y:.1f}", WIDTH - RIGHT, f"{y:.1f}", LEFT - 6, f"{y + 4:.1f}", short_number(value)))
    return format_html_join("", '<line class="chart-grid" x1="{}" y1="{}" x2="{}" y2="{}"/>'
                            '<text class="chart-label" x="{}" y="{}" text-anchor="end">{}</text>', rows)


def _y(value: float, top_value: float) -> float:
    return TOP + (HEIGHT - TOP - BOTTOM) * (1 - value / top_value)


def _x(index: int, count: int) -> float:
    return LEFT + (WIDTH - LEFT - RIGHT) * (index / max(count - 1, 1))


def _time_label(moment: datetime, unit: str) -> str:
    return moment.strftime("%b %d" if unit == "day" else "%H:%M")


def _x_labels(moments: list[datetime], unit: str) -> str:
    count = len(moments)
    every = max(1, math.ceil(count / 6))
    ticks = [(f"{_x(i, count):.1f}", HEIGHT - 8, _time_label(m, unit)) for i, m in enumerate(moments) if i % every == 0]
    return format_html_join("", '<text class="chart-label" x="{}" y="{}" text-anchor="middle">{}</text>', ticks)


def line_chart(points: list[tuple[datetime, float]], *, title: str, unit: str, value_label: str) -> str:
    """A time series as a line over a shaded area; `unit` is the bucket size (minute, hour, day)."""
    values = [value for _, value in points]
    top_value = nice_max(max(values, default=0))
    coords = [(_x(i, len(points)), _y(v, top_value)) for i, v in enumerate(values)]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    area = f"{LEFT},{_y(0, top_value):.1f} {line} {WIDTH - RIGHT},{_y(0, top_value):.1f}" if coords else ""
    body = mark_safe(_y_grid(top_value) + _x_labels([m for m, _ in points], unit) + format_html(
        '<polygon class="chart-area" points="{}"/><polyline class="chart-line" points="{}"/>', area, line))
    peak = max(values, default=0)
    description = f"{len(points)} points per {unit}; highest {short_number(peak)} {value_label}."
    return _frame(title, description, body)


def bar_chart(items: list[tuple[str, float]], *, title: str, value_label: str) -> str:
    """Horizontal bars with their labels and values (state counts, top tenants)."""
    height_each, top_value = 28, nice_max(max((v for _, v in items), default=0))
    span = WIDTH - 180 - 60
    rows = [(f"{TOP + i * height_each + 18:.0f}", label, 170, TOP + i * height_each + 4,
             f"{max(span * value / top_value, 1):.1f}", f"{170 + max(span * value / top_value, 1) + 6:.1f}",
             TOP + i * height_each + 18, short_number(value)) for i, (label, value) in enumerate(items)]
    body = format_html_join(
        "", '<text class="chart-label" x="160" y="{}" text-anchor="end">{}</text>'
            '<rect class="chart-bar" x="{}" y="{}" width="{}" height="20" rx="2"/>'
            '<text class="chart-value" x="{}" y="{}">{}</text>', rows)
    height = TOP + len(items) * height_each + 8
    description = "; ".join(f"{label}: {short_number(value)} {value_label}" for label, value in items)
    ident = f"chart-{next(_ids)}"
    return format_html(
        '<svg class="chart chart-bars" viewBox="0 0 {} {}" role="img" aria-labelledby="{}-t {}-d" focusable="false">'
        '<title id="{}-t">{}</title><desc id="{}-d">{}</desc>{}</svg>',
        WIDTH, height, ident, ident, ident, title, ident, description or "No data.", body)


def scaling_chart(samples: list, decisions: list) -> str:
    """Serving and warm instances against waiting requests over time, each scaling decision marked."""
    if not samples:
        return _frame("Instances and demand", "No samples yet: the autoscaler records one every few seconds.", "")
    start, end = samples[0].at, samples[-1].at
    span = max((end - start).total_seconds(), 1.0)
    top_value = nice_max(max(max(s.serving + s.warm, s.waiting) for s in samples))

    def x(moment) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * (moment - start).total_seconds() / span

    def steps(values) -> str:
        points, previous = [], None
        for sample, value in zip(samples, values):
            if previous is not None:
                points.append(f"{x(sample.at):.1f},{_y(previous, top_value):.1f}")
            points.append(f"{x(sample.at):.1f},{_y(value, top_value):.1f}")
            previous = value
        return " ".join(points)

    marks = [(f"{x(d.decided_at):.1f}", TOP, f"{x(d.decided_at):.1f}", HEIGHT - BOTTOM,
              f"{d.decided_at:%H:%M:%S} {d.rule}: {d.from_serving} → {d.to_serving}")
             for d in decisions if start <= d.decided_at <= end]
    body = mark_safe(_y_grid(top_value) + _x_labels([s.at for s in samples][::max(1, len(samples) // 6)], "minute")
                     + format_html(
        '<polyline class="chart-line chart-serving" points="{}"/><polyline class="chart-line chart-warm" points="{}"/>'
        '<polyline class="chart-line chart-demand" points="{}"/>',
        steps([s.serving for s in samples]), steps([s.serving + s.warm for s in samples]),
        " ".join(f"{x(s.at):.1f},{_y(s.waiting, top_value):.1f}" for s in samples))
                     + format_html_join("", '<line class="chart-decision" x1="{}" y1="{}" x2="{}" y2="{}">'
                                            '<title>{}</title></line>', marks))
    description = (f"{len(samples)} samples from {start:%H:%M} to {end:%H:%M}: serving instances (solid), serving plus "
                   f"warm (dashed), waiting requests (thin); {len(marks)} scaling decisions marked.")
    return _frame("Instances and demand", description, body)


def versions_chart(series: dict[str, list[tuple[datetime, float | None]]], *, title: str, value_label: str) -> str:
    """Two versions' figure over the same time buckets: A solid, B dashed; a bucket without requests is a gap."""
    moments = [moment for moment, _ in next(iter(series.values()), [])]
    values = [v for points in series.values() for _, v in points if v is not None]
    if not moments or not values:
        return _frame(title, "No requests judged yet.", "")
    top_value = nice_max(max(values))

    def segments(points) -> list[list[str]]:
        runs: list[list[str]] = [[]]
        for index, (_, value) in enumerate(points):
            if value is None:
                runs.append([])
            else:
                runs[-1].append(f"{_x(index, len(points)):.1f},{_y(value, top_value):.1f}")
        return [run for run in runs if run]

    lines = [(f"chart-line chart-version-{slot}", " ".join(run))
             for slot, points in zip("ab", series.values()) for run in segments(points) if run]
    body = mark_safe(_y_grid(top_value) + _x_labels(moments, "minute")
                     + format_html_join("", '<polyline class="{}" points="{}"/>', lines))
    latest = "; ".join(f"{label}: {_last(points, value_label)}" for label, points in series.items())
    description = f"{len(moments)} intervals from {moments[0]:%H:%M} to {moments[-1]:%H:%M}; latest {latest}."
    return _frame(title, description, body)


def _last(points, value_label: str) -> str:
    seen = [value for _, value in points if value is not None]
    return f"{short_number(seen[-1])} {value_label}" if seen else "no requests"
