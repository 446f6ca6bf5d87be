"""Turn an engine's Prometheus `/metrics` text into the few numbers the fleet and router use."""
import math
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# The engine series Switchyard relies on (this module, the routing benchmark, the Grafana dashboard in
# deploy/grafana/switchyard.json), by name and Prometheus type: what real vLLM 0.32 exports (source:
# `vllm/v1/metrics/loggers.py`, `PrometheusStatLogger`, labels `model_name` and `engine`) and what the
# simulator exports too (simulator/metrics.py). tests/deploy/test_grafana_dashboard.py checks both.
VLLM_SERIES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:request_success": "counter",  # label finished_reason
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
}
GAUGES = {"vllm:num_requests_running": "num_requests_running",
          "vllm:num_requests_waiting": "num_requests_waiting",
          "vllm:kv_cache_usage_perc": "kv_cache_usage_perc"}
TTFT = "vllm:time_to_first_token_seconds"


def summarize(text: str) -> dict:
    """Gauges summed over engines, prefix-cache hit ratio and a TTFT histogram summary."""
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    summary: dict[str, Any] = {key: _sum(samples, name) for name, key in GAUGES.items()}
    hits = _sum(samples, "vllm:prefix_cache_hits_total")
    queries = _sum(samples, "vllm:prefix_cache_queries_total")
    summary["prefix_cache_hits"], summary["prefix_cache_queries"] = hits, queries
    summary["prefix_cache_hit_ratio"] = hits / queries if queries else None
    summary["ttft"] = _histogram(samples, TTFT)
    return summary


def _sum(samples, name: str) -> float:
    return float(sum(s.value for s in samples if s.name == name))


def _histogram(samples, name: str) -> dict:
    count = _sum(samples, name + "_count")
    total = _sum(samples, name + "_sum")
    buckets: dict[float, float] = {}
    for s in samples:
        if s.name == name + "_bucket":
            bound = float(s.labels["le"])
            buckets[bound] = buckets.get(bound, 0.0) + s.value
    return {"count": count, "mean_seconds": total / count if count else None,
            "p50_seconds": _quantile(buckets, count, 0.5), "p95_seconds": _quantile(buckets, count, 0.95)}


def _quantile(buckets: dict[float, float], count: float, q: float) -> float | None:
    """The upper bound of the first bucket holding the q-quantile (Prometheus' coarse estimate)."""
    if not count:
        return None
    for bound in sorted(buckets):
        if buckets[bound] >= q * count:
            return None if math.isinf(bound) else bound
    return None
