"""Serving advice from a deployment's live figures: pure rules over what the fleet already samples.

Inputs are the autoscaler's demand samples (waiting, running, KV-cache usage per pass) and the engines'
prefix-cache counters (vLLM's `prefix_cache_queries_total` / `prefix_cache_hits_total`, in tokens).
Each rule states the figures that triggered it, so an operator can check it against the charts.
"""
from dataclasses import asdict, dataclass

from django.db import models


class Severity(models.TextChoices):
    ACTION = "action", "Act on it"
    WARNING = "warning", "Watch it"
    INFO = "info", "For information"


@dataclass(frozen=True)
class Sample:
    """One look at the deployment (fleet.models.DemandSample's figures), `at` in seconds."""

    at: float
    serving: int
    waiting: float
    running: float
    kv_cache_usage: float | None


@dataclass(frozen=True)
class LiveSignals:
    samples: list[Sample]
    prefix_cache_hits: float = 0.0  # tokens, summed over the engines (counters since each engine started)
    prefix_cache_queries: float = 0.0
    prefix_caching_enabled: bool = True
    routing_policy: str = "prefix_affinity"


@dataclass(frozen=True)
class Thresholds:
    low_hit_ratio: float = 0.30
    min_prefix_queries: float = 10_000  # tokens looked up before the hit ratio means anything
    high_kv_usage: float = 0.85
    busy_waiting_per_instance: float = 1.0
    idle_load_per_instance: float = 0.5  # running + waiting per serving instance
    min_samples: int = 3


@dataclass(frozen=True)
class Advice:
    code: str
    severity: str
    title: str
    detail: str

    def as_dict(self) -> dict:
        return asdict(self)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def slope(samples: list[Sample]) -> float:
    """Least-squares trend of waiting requests, per minute."""
    if len(samples) < 2:
        return 0.0
    t0 = samples[0].at
    xs, ys = [s.at - t0 for s in samples], [s.waiting for s in samples]
    mx, my = _mean(xs), _mean(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / spread if spread else 0.0


def prefix_cache_advice(signals: LiveSignals, limits: Thresholds) -> list[Advice]:
    """A low hit ratio: route same-prefix requests together, or make prompts share their start."""
    if signals.prefix_cache_queries < limits.min_prefix_queries:
        return []
    if not signals.prefix_caching_enabled:
        return [Advice("enable_prefix_caching", Severity.ACTION, "Turn prefix caching on",
                       "The engines run without --enable-prefix-caching: every prompt is computed in full.")]
    ratio = signals.prefix_cache_hits / signals.prefix_cache_queries
    if ratio >= limits.low_hit_ratio:
        return []
    figures = f"{ratio:.0%} of {signals.prefix_cache_queries:,.0f} prompt tokens looked up were cached"
    serving = signals.samples[-1].serving if signals.samples else 1
    if signals.routing_policy != "prefix_affinity" and serving > 1:
        return [Advice("enable_prefix_affinity", Severity.ACTION, "Route by prompt prefix",
                       f"{figures}. Routing is {signals.routing_policy}: requests that share a prefix land on "
                       "different engines. Prefix-affinity routing sends them to the same engine's cache.")]
    return [Advice("restructure_prompts", Severity.WARNING, "Make prompts share their beginning",
                   f"{figures}. Put what repeats first (system prompt, repository and file headers) and what "
                   "changes last (the text around the cursor), so consecutive requests share cached blocks.")]


def pressure_advice(samples: list[Sample], limits: Thresholds) -> list[Advice]:
    """KV cache full and the queue growing: more replicas, or more memory per replica."""
    kv = [s.kv_cache_usage for s in samples if s.kv_cache_usage is not None]
    serving = max(1, samples[-1].serving)
    waiting, trend = _mean([s.waiting for s in samples]) / serving, slope(samples)
    kv_mean = _mean(kv)
    queue_growing = trend > 0 and waiting >= limits.busy_waiting_per_instance
    if kv and kv_mean >= limits.high_kv_usage and queue_growing:
        return [Advice("scale_out", Severity.ACTION, "Add replicas or memory",
                       f"KV cache {kv_mean:.0%} full on average and the queue growing ({trend:+.1f} waiting/min, "
                       f"{waiting:.1f} waiting per instance): add replicas, or raise gpu_memory_utilization, use a "
                       "larger GPU or an fp8 KV cache so each replica holds more sequences.")]
    if queue_growing:
        return [Advice("raise_max_num_seqs", Severity.WARNING, "Requests queue while the KV cache has room",
                       f"{waiting:.1f} waiting per instance and growing ({trend:+.1f}/min) with the KV cache "
                       f"{kv_mean:.0%} full: max_num_seqs may be the limit; raise it, or add replicas if "
                       "latency is already at its bound.")]
    if kv and kv_mean >= limits.high_kv_usage:
        return [Advice("kv_nearly_full", Severity.INFO, "KV cache nearly full, no queue yet",
                       f"KV cache {kv_mean:.0%} full on average with no growing queue: enough for now; a burst "
                       "would queue or preempt.")]
    return []


def idle_advice(samples: list[Sample], limits: Thresholds) -> list[Advice]:
    """GPUs mostly idle: fewer replicas, or a smaller model / GPU when already at one."""
    serving = samples[-1].serving
    if serving == 0:
        return []
    load = _mean([(s.running + s.waiting) / max(1, s.serving) for s in samples])
    peak_kv = max((s.kv_cache_usage for s in samples if s.kv_cache_usage is not None), default=0.0)
    if load >= limits.idle_load_per_instance:
        return []
    if serving > 1:
        return [Advice("fewer_replicas", Severity.WARNING, "Fewer replicas would do",
                       f"{load:.2f} requests in flight per serving instance on average across {serving} "
                       "instances: scale in (or let the autoscaler: min_replicas lower).")]
    if peak_kv < 0.2:
        return [Advice("smaller_model", Severity.INFO, "The GPU is mostly idle",
                       f"{load:.2f} requests in flight on average and at most {peak_kv:.0%} of the KV cache used: "
                       "a smaller GPU, or a smaller or quantized model, would serve this load.")]
    return []


def advise(signals: LiveSignals, limits: Thresholds | None = None) -> list[Advice]:
    """Every piece of advice the figures support, most urgent first."""
    limits = limits or Thresholds()
    found = prefix_cache_advice(signals, limits)
    if len(signals.samples) >= limits.min_samples:
        found += pressure_advice(signals.samples, limits) + idle_advice(signals.samples, limits)
    order = {Severity.ACTION: 0, Severity.WARNING: 1, Severity.INFO: 2}
    return sorted(found, key=lambda advice: order[Severity(advice.severity)])
