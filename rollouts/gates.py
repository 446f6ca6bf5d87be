"""Gate evaluation: a pure function of the two versions' figures → a verdict (no database, no clock).

A gate compares the new version (B) with the old one (A) over the same window: B's error rate under
an absolute ceiling and under `error_rate_ratio` × A's (plus a small margin, so 0 vs 1 error on a
few requests is not a failure), B's p95 time to first token under `ttft_p95_ratio` × A's (plus a
margin of milliseconds), and none of B's engines failed. Nothing is judged before B has served
`min_requests`: a failing gate rolls back at once, passing ones must also hold for the stage's bake
time; still too few requests `data_timeout_seconds` after the bake is "insufficient" (the rollout
pauses for a person). A's figures come from the same window when A still has enough traffic, else
from its baseline taken before traffic moved.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from django.db import models


class Verdict(models.TextChoices):
    WAIT = "wait", "Gates hold so far; baking"
    PASS = "pass", "Baked with every gate holding"
    INSUFFICIENT = "insufficient", "Baked, but too few requests to judge"
    FAIL = "fail", "A gate failed"


@dataclass(frozen=True)
class Gates:
    """Thresholds of one rollout (stored as JSON on it; every field has a default)."""

    max_error_rate: float = 0.05
    error_rate_ratio: float = 2.0
    error_rate_margin: float = 0.01
    ttft_p95_ratio: float = 1.2
    ttft_p95_margin_ms: float = 50.0  # so milliseconds of noise on a fast model fail nothing
    min_requests: int = 50
    window_seconds: int = 300
    data_timeout_seconds: int = 600  # after the bake, how long to wait for min_requests before pausing

    @classmethod
    def from_json(cls, data: dict | None) -> "Gates":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})

    def as_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Figures:
    """One version's requests over a window: judged requests (answered or failed by the engine), engine
    errors among them, and the p95 time to first token of those answered (ms)."""

    requests: int = 0
    errors: int = 0
    ttft_p95_ms: float | None = None

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class Observation:
    new: Figures
    old: Figures
    old_baseline: Figures | None = None
    failed_engines: int = 0  # engines of the new version that failed since the rollout started
    baked: bool = False  # the stage's bake time is over
    overdue: bool = False  # … and so is the data timeout after it


@dataclass(frozen=True)
class Evaluation:
    verdict: str
    failed: tuple[str, ...] = ()
    reasons: tuple[str, ...] = field(default=())

    def as_json(self) -> dict:
        return {"verdict": self.verdict, "failed": list(self.failed), "reasons": list(self.reasons)}


def evaluate(gates: Gates, seen: Observation) -> Evaluation:
    """The verdict on the new version from what was seen."""
    if seen.failed_engines:
        why = f"{seen.failed_engines} engine(s) of the new version failed"
        return Evaluation(Verdict.FAIL, ("engine_health",), (why,))
    if seen.new.requests < max(1, gates.min_requests):
        if gates.min_requests <= 0 and seen.baked:
            return Evaluation(Verdict.PASS)
        verdict = Verdict.INSUFFICIENT if seen.baked and seen.overdue else Verdict.WAIT
        return Evaluation(verdict, (), (f"{seen.new.requests} of {gates.min_requests} requests needed",))
    failures = [found for found in (_error_ceiling(gates, seen), _error_ratio(gates, seen), _ttft(gates, seen))
                if found]
    if failures:
        return Evaluation(Verdict.FAIL, tuple(name for name, _ in failures), tuple(why for _, why in failures))
    return Evaluation(Verdict.PASS if seen.baked else Verdict.WAIT)


def reference(gates: Gates, seen: Observation) -> Figures | None:
    """A's figures to compare with: the same window's when it has enough requests, else its baseline."""
    if seen.old.requests >= max(1, gates.min_requests):
        return seen.old
    baseline = seen.old_baseline
    return baseline if baseline is not None and baseline.requests >= max(1, gates.min_requests) else None


def _error_ceiling(gates: Gates, seen: Observation):
    rate = seen.new.error_rate
    if rate > gates.max_error_rate:
        return "error_rate", f"error rate {rate:.1%} over the ceiling {gates.max_error_rate:.1%}"
    return None


def _error_ratio(gates: Gates, seen: Observation):
    old = reference(gates, seen)
    if old is None:
        return None
    limit = old.error_rate * gates.error_rate_ratio + gates.error_rate_margin
    if seen.new.error_rate > limit:
        return ("error_rate_vs_old", f"error rate {seen.new.error_rate:.1%} over {gates.error_rate_ratio}× the old "
                                     f"version's {old.error_rate:.1%} (+{gates.error_rate_margin:.1%})")
    return None


def _ttft(gates: Gates, seen: Observation):
    old = reference(gates, seen)
    if old is None or old.ttft_p95_ms is None or seen.new.ttft_p95_ms is None or old.ttft_p95_ms <= 0:
        return None
    ratio = seen.new.ttft_p95_ms / old.ttft_p95_ms
    if seen.new.ttft_p95_ms > old.ttft_p95_ms * gates.ttft_p95_ratio + gates.ttft_p95_margin_ms:
        return ("ttft_p95_vs_old", f"p95 TTFT {seen.new.ttft_p95_ms:.0f} ms is {ratio:.2f}× the old version's "
                                   f"{old.ttft_p95_ms:.0f} ms (limit {gates.ttft_p95_ratio}× "
                                   f"+ {gates.ttft_p95_margin_ms:.0f} ms)")
    return None
