"""Prometheus metrics with vLLM's names, on a per-app CollectorRegistry.

Everything is kept as plain numbers on the hot path (integer adds, one bisect
per histogram observation) and turned into prometheus_client metric families
only at scrape time by a custom collector registered on a per-app
``CollectorRegistry``; prometheus_client's own ``Histogram`` takes a lock per
bucket, which costs more than the rest of a zero-latency request.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

if TYPE_CHECKING:
    from .engine import Engine

LABELS = ("model_name", "engine")
FINISH_REASONS = ("stop", "length", "abort")

# Bucket boundaries copied from vLLM's v1 Prometheus logger.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                   50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)

# Help strings as vLLM writes them.
DOCS = {
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
    "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:num_preemptions": "Cumulative number of preemption from the engine.",
    "vllm:request_success": "Count of successfully processed requests.",
    "vllm:time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
    "vllm:request_queue_time_seconds": "Histogram of time spent in WAITING phase for request.",
    "vllm:request_prefill_time_seconds": "Histogram of time spent in PREFILL phase for request.",
    "vllm:request_decode_time_seconds": "Histogram of time spent in DECODE phase for request.",
}


class EngineStats:
    """Monotonic counters the engine bumps with plain integer adds."""

    __slots__ = ("prompt_tokens", "generation_tokens", "prefix_cache_queries",
                 "prefix_cache_hits", "num_preemptions", "finished")

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.num_preemptions = 0
        self.finished = dict.fromkeys(FINISH_REASONS, 0)


class _EngineCollector:
    """Yields vLLM gauges, counters and histograms from live state at scrape time."""

    def __init__(self, engine: "Engine", metrics: "SimulatorMetrics") -> None:
        self.engine = engine
        self.metrics = metrics
        self.labels = metrics.labels

    def _gauge(self, name: str, doc: str, value: float) -> Metric:
        """One labelled gauge sample."""
        g = GaugeMetricFamily(name, doc, labels=LABELS)
        g.add_metric(self.labels, value)
        return g

    def _counter(self, name: str, doc: str, value: float) -> Metric:
        """One labelled counter sample (exposed with a ``_total`` suffix)."""
        c = CounterMetricFamily(name, doc, labels=LABELS)
        c.add_metric(self.labels, value)
        return c

    def collect(self) -> Iterator[Metric]:
        """Build the gauge, counter and histogram families."""
        e, s = self.engine, self.engine.stats
        gauges = (("vllm:num_requests_running", e.num_running()),
                  ("vllm:num_requests_waiting", len(e.waiting)),
                  ("vllm:kv_cache_usage_perc", e.kv.usage()))
        for name, value in gauges:
            yield self._gauge(name, DOCS[name], value)
        counters = (("vllm:prefix_cache_queries", s.prefix_cache_queries),
                    ("vllm:prefix_cache_hits", s.prefix_cache_hits),
                    ("vllm:prompt_tokens", s.prompt_tokens),
                    ("vllm:generation_tokens", s.generation_tokens),
                    ("vllm:num_preemptions", s.num_preemptions))
        for name, value in counters:
            yield self._counter(name, DOCS[name], value)
        ok = CounterMetricFamily("vllm:request_success", DOCS["vllm:request_success"],
                                 labels=LABELS + ("finished_reason",))
        for reason, count in s.finished.items():
            ok.add_metric(self.labels + [reason], count)
        yield ok
        for hist in self.metrics.histograms:
            yield hist.family(self.labels)


class LatencyHistogram:
    """Lock-free histogram (single event loop) rendered as a Prometheus histogram."""

    __slots__ = ("name", "doc", "bounds", "counts", "sum")

    def __init__(self, name: str, doc: str, bounds: tuple) -> None:
        self.name, self.doc, self.bounds = name, doc, bounds
        self.counts = [0] * (len(bounds) + 1)  # last slot is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Record one observation (``le`` semantics: value <= bound)."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        """Total number of observations."""
        return sum(self.counts)

    def family(self, labels: list[str]) -> Metric:
        """Cumulative-bucket metric family for exposition."""
        h = HistogramMetricFamily(self.name, self.doc, labels=LABELS)
        buckets, acc = [], 0
        for bound, n in zip(self.bounds + (float("inf"),), self.counts):
            acc += n
            buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), acc))
        h.add_metric(labels, buckets, self.sum)
        return h


def _hist(name: str, buckets: tuple) -> LatencyHistogram:
    """Histogram with vLLM's help text."""
    return LatencyHistogram(name, DOCS[name], buckets)


class SimulatorMetrics:
    """Registry plus the request-latency histograms for one app instance."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.labels = [model_name, "0"]
        self.ttft = _hist("vllm:time_to_first_token_seconds", TTFT_BUCKETS)
        self.e2e = _hist("vllm:e2e_request_latency_seconds", LATENCY_BUCKETS)
        self.queue = _hist("vllm:request_queue_time_seconds", LATENCY_BUCKETS)
        self.prefill = _hist("vllm:request_prefill_time_seconds", LATENCY_BUCKETS)
        self.decode = _hist("vllm:request_decode_time_seconds", LATENCY_BUCKETS)
        self.histograms = (self.ttft, self.e2e, self.queue, self.prefill, self.decode)

    def attach_engine(self, engine: "Engine") -> None:
        """Register the scrape-time collector for the engine's gauges/counters."""
        self.registry.register(_EngineCollector(engine, self))

    def render(self) -> bytes:
        """Prometheus text exposition of everything in the registry."""
        return generate_latest(self.registry)
