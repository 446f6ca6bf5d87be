"""The time ranges every console chart offers (`?range=`), with the bucket size each one uses."""
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.utils import timezone

STEPS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}
# key → (label, length, bucket)
RANGES = {
    "1h": ("Last hour", timedelta(hours=1), "minute"),
    "24h": ("Last 24 hours", timedelta(hours=24), "hour"),
    "7d": ("Last 7 days", timedelta(days=7), "hour"),
    "30d": ("Last 30 days", timedelta(days=30), "day"),
}
DEFAULT = "24h"


@dataclass(frozen=True)
class TimeRange:
    """[start, end) split into buckets of one `unit` (minute, hour or day, UTC)."""

    key: str
    label: str
    start: datetime
    end: datetime
    unit: str

    @property
    def step(self) -> timedelta:
        return STEPS[self.unit]

    @property
    def minutes(self) -> float:
        return (self.end - self.start).total_seconds() / 60

    def buckets(self) -> list[datetime]:
        count = int((self.end - self.start) / self.step)
        return [self.start + self.step * index for index in range(count)]

    def choices(self) -> list[tuple[str, str, bool]]:
        return [(key, label, key == self.key) for key, (label, _, _) in RANGES.items()]


def floor(moment: datetime, unit: str) -> datetime:
    moment = moment.astimezone(dt_timezone.utc).replace(second=0, microsecond=0)
    if unit in ("hour", "day"):
        moment = moment.replace(minute=0)
    if unit == "day":
        moment = moment.replace(hour=0)
    return moment


def time_range(params, now: datetime | None = None) -> TimeRange:
    """The range asked for in `params['range']` (unknown values fall back to the default), ending now."""
    key = params.get("range") if params.get("range") in RANGES else DEFAULT
    label, length, unit = RANGES[key]
    end = floor(now or timezone.now(), unit) + STEPS[unit]  # the current, partial bucket is included
    return TimeRange(key=key, label=label, start=end - length, end=end, unit=unit)
