"""Scheduled scaling: windows of the week during which a deployment serves at least `min_serving`.

Pure, like the policy: `parse` checks what an operator sent and gives back `Window`s (ValueError with a
message naming the window otherwise); `floor_at` says which window, if any, asks for capacity at a moment,
starting `lead_seconds` early so that cold starts are done when the window opens. Times are wall-clock
times in the window's IANA zone (zoneinfo), so a 09:00 Europe/Berlin window opens at 09:00 local time on
both sides of a DST change. An `end` before `start` is an overnight window: it ends the next day; its days
are the days it starts on.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MAX_WINDOWS = 20
DEFAULT_LEAD_SECONDS = 300  # longer than a cold start of a small model on real vLLM (docs/autoscaling.md)
MAX_LEAD_SECONDS = 6 * 3600
FIELDS = {"days", "start", "end", "time_zone", "min_serving"}


@dataclass(frozen=True)
class Window:
    days: frozenset[int]  # 0 = Monday
    start: time
    end: time
    time_zone: str
    min_serving: int

    @property
    def overnight(self) -> bool:
        return self.end <= self.start

    def label(self) -> str:
        return f"{days_label(self.days)} {_hhmm(self.start)}-{_hhmm(self.end)} {self.time_zone}"

    def as_dict(self) -> dict:
        return {"days": days_label(self.days).lower(), "start": _hhmm(self.start), "end": _hhmm(self.end),
                "time_zone": self.time_zone, "min_serving": self.min_serving}

    def opens_closes(self, day: date) -> tuple[float, float]:
        """The epoch seconds at which this window's occurrence starting on `day` opens and closes."""
        zone = ZoneInfo(self.time_zone)
        opens = datetime.combine(day, self.start, tzinfo=zone)
        closes = datetime.combine(day + timedelta(days=1) if self.overnight else day, self.end, tzinfo=zone)
        return opens.timestamp(), closes.timestamp()


@dataclass(frozen=True)
class Floor:
    min_serving: int
    window: Window
    opens_at: float  # epoch seconds

    def reason(self, lead_seconds: float, now: float) -> str:
        early = f", {self.opens_at - now:.0f} s before it opens (lead {lead_seconds:g} s)" if now < self.opens_at \
            else ""
        return f"schedule: window {self.window.label()} asks {self.min_serving}{early}"


def floor_at(windows: tuple[Window, ...], now: float, lead_seconds: float) -> Floor | None:
    """The window asking for the most serving instances at `now` (open, or opening within the lead), or None."""
    found = []
    for window in windows:
        local = datetime.fromtimestamp(now, ZoneInfo(window.time_zone)).date()
        for day in (local - timedelta(days=1), local, local + timedelta(days=1)):
            if day.weekday() not in window.days:
                continue
            opens, closes = window.opens_closes(day)
            if opens - lead_seconds <= now < closes:
                found.append(Floor(window.min_serving, window, opens))
    return max(found, key=lambda f: f.min_serving, default=None)


def parse(raw) -> tuple[Window, ...]:
    """The windows of an operator's list (ValueError naming the first bad window otherwise)."""
    if raw in (None, ""):
        return ()
    if not isinstance(raw, list):
        raise ValueError("Must be a list of windows.")
    if len(raw) > MAX_WINDOWS:
        raise ValueError(f"At most {MAX_WINDOWS} windows.")
    windows = []
    for number, item in enumerate(raw, start=1):
        try:
            windows.append(parse_window(item))
        except ValueError as exc:
            raise ValueError(f"Window {number}: {exc}") from None
    return tuple(windows)


def parse_window(item) -> Window:
    if not isinstance(item, dict):
        raise ValueError("must be an object with days, start, end, time_zone and min_serving.")
    unknown = set(item) - FIELDS
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(sorted(unknown))}.")
    start, end = parse_time(item.get("start"), "start"), parse_time(item.get("end"), "end")
    if start == end:
        raise ValueError("start and end are the same time (an end before the start is an overnight window).")
    return Window(days=parse_days(item.get("days")), start=start, end=end,
                  time_zone=parse_zone(item.get("time_zone", "UTC")), min_serving=parse_min(item.get("min_serving")))


def parse_days(raw) -> frozenset[int]:
    """`["mon", "tue"]`, or a string of names and ranges: "mon-fri", "sat,sun", "daily"."""
    if isinstance(raw, str):
        raw = list(DAYS) if raw.strip().lower() == "daily" else [p for p in raw.replace(" ", "").split(",") if p]
    if not isinstance(raw, list) or not raw or not all(isinstance(p, str) for p in raw):
        raise ValueError('days must be day names such as ["mon", "tue"] or "mon-fri".')
    days: set[int] = set()
    for part in raw:
        first, _, last = part.strip().lower().partition("-")
        if first not in DAYS or (last and last not in DAYS):
            raise ValueError(f"unknown day {part!r} (use {', '.join(DAYS)}).")
        a, b = DAYS.index(first), DAYS.index(last or first)
        days.update(range(a, b + 1) if a <= b else [*range(a, 7), *range(0, b + 1)])
    return frozenset(days)


def parse_time(raw, name: str) -> time:
    """"HH:MM" (or "HH:MM:SS"), 00:00–23:59."""
    parts = raw.split(":") if isinstance(raw, str) else []
    if len(parts) not in (2, 3) or not all(p.isdigit() and len(p) == 2 for p in parts):
        raise ValueError(f'{name} must be a time "HH:MM".')
    try:
        hour, minute, second = (int(p) for p in [*parts, "00"][:3])
        return time(hour, minute, second)
    except ValueError:
        raise ValueError(f'{name} must be a time "HH:MM" between 00:00 and 23:59.') from None


def parse_zone(raw) -> str:
    if not isinstance(raw, str) or not raw:
        raise ValueError('time_zone must be an IANA zone name such as "Europe/Berlin".')
    try:
        ZoneInfo(raw)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f'unknown time zone {raw[:64]!r} (use an IANA name such as "Europe/Berlin").') from None
    return raw


def parse_min(raw) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise ValueError("min_serving must be a whole number of at least 1.")
    return raw


def days_label(days: frozenset[int]) -> str:
    """"Mon-Fri", "Sat,Sun", "Mon,Wed-Fri": consecutive days as ranges."""
    runs: list[list[int]] = []
    for day in sorted(days):
        if runs and runs[-1][-1] == day - 1:
            runs[-1].append(day)
        else:
            runs.append([day])
    name = [d.capitalize() for d in DAYS]
    return ",".join(name[r[0]] if len(r) == 1 else f"{name[r[0]]}-{name[r[-1]]}" for r in runs)


def _hhmm(value: time) -> str:
    return value.strftime("%H:%M:%S" if value.second else "%H:%M")
