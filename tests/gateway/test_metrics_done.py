"""A finished request shows up in /metrics exactly as prometheus_client's own `labels().inc()` /
`labels().observe()` would count it (observe_done counts in the children's values directly)."""
import itertools

import pytest

from gateway.metering import metrics as metrics_module
from gateway.metering.metrics import LATENCY_BUCKETS, GatewayMetrics
from gateway.metering.recorder import RequestRecord


def _reference_observe_done(metrics: GatewayMetrics, record: RequestRecord) -> None:
    """The public-API version observe_done replaced."""
    tenant = str(record.tenant_id or "")
    model = record.model_name if record.model_known else ""
    metrics.requests.labels(str(record.status_code), model, tenant, record.endpoint).inc()
    metrics.latency.labels(model, record.endpoint).observe(max(0.0, metrics_module.time.monotonic() - record.started))
    if record.ttft_ms is not None:
        metrics.ttft.labels(model).observe(record.ttft_ms / 1000)
    for kind, count in (("prompt", record.prompt_tokens), ("completion", record.completion_tokens),
                        ("cached", record.cached_tokens)):
        if count:
            metrics.tokens.labels(model, tenant, kind).inc(count)


def _records():
    """Requests across label sets, with latencies and TTFTs on, between and beyond bucket bounds."""
    seconds = [0.0, 0.001, *LATENCY_BUCKETS, 0.3, 7.5, 200.0]
    shapes = itertools.product([200, 429, 502], [("tiny-coder", True), ("made-up", False)], [1, None, 0],
                               ["chat", "completions"])
    for index, (status, (model, known), tenant, endpoint) in enumerate(shapes):
        record = RequestRecord(f"r{index}", endpoint, started=0.0, tenant_id=tenant, model_name=model,
                               model_known=known, status_code=status)
        record.ttft_ms = None if index % 4 == 0 else seconds[index % len(seconds)] * 1000
        record.prompt_tokens, record.completion_tokens = (index % 3) * 50, (index % 5) * 7
        record.cached_tokens = record.prompt_tokens // 2 if index % 2 else 0
        yield record, seconds[(index * 7) % len(seconds)]


def _exposition(metrics: GatewayMetrics) -> list[str]:
    # Creation timestamps differ between two registries built a moment apart.
    return [line for line in metrics.render().decode().splitlines() if "_created" not in line]


def test_observe_done_exposes_what_the_public_api_exposes(monkeypatch):
    fast, reference = GatewayMetrics(), GatewayMetrics()
    for _round in range(2):  # the second round hits the cached series
        for record, latency in _records():
            # record.started is 0
            monkeypatch.setattr(metrics_module.time, "monotonic", lambda latency=latency: latency)
            fast.observe_done(record)
            _reference_observe_done(reference, record)
    assert _exposition(fast) == _exposition(reference)
    assert any(line.startswith("switchyard_gateway_ttft_seconds_bucket") for line in _exposition(fast))


def test_series_appear_only_once_counted():
    metrics = GatewayMetrics()
    metrics.observe_done(RequestRecord("r1", "chat", tenant_id=4, model_name="tiny-coder", model_known=True,
                                       status_code=200, prompt_tokens=10))
    text = "\n".join(_exposition(metrics))
    assert 'kind="prompt"' in text and 'kind="completion"' not in text and 'kind="cached"' not in text
    assert "switchyard_gateway_ttft_seconds_count" not in text  # no first byte, no TTFT series


def test_the_cache_of_series_is_bounded(monkeypatch):
    monkeypatch.setattr(metrics_module, "MAX_CACHED_SERIES", 3)
    metrics = GatewayMetrics()
    for tenant in range(10):
        metrics.observe_done(RequestRecord("r", "chat", tenant_id=tenant, status_code=200))
    assert len(metrics._done) <= 3
    assert sum(1 for line in _exposition(metrics) if line.startswith("switchyard_gateway_requests_total")) == 10


@pytest.mark.parametrize("amount", [0.0, 0.005, 0.0050001, 120, 120.5])
def test_histogram_observer_picks_prometheus_bucket(amount):
    fast, reference = GatewayMetrics(), GatewayMetrics()
    metrics_module.HistogramObserver(fast.ttft.labels("m")).observe(amount)
    reference.ttft.labels("m").observe(amount)
    assert _exposition(fast) == _exposition(reference)


def test_queue_wait_and_placements_expose_what_the_public_api_exposes():
    fast, reference = GatewayMetrics(), GatewayMetrics()
    for seconds in [0.0, 0.001, *LATENCY_BUCKETS, 0.3, 200.0]:
        fast.observe_queue_wait(seconds)
        reference.queue_wait.observe(seconds)
    for home in (True, True, False, True, False):
        fast.observe_placement(home)
        (reference.affinity_home if home else reference.affinity_spill).inc()
    assert _exposition(fast) == _exposition(reference)


# `--workers` mode: prometheus_client chooses multiprocess values at import, so each way runs in a process
# of its own with its own directory (as each gateway worker does), and the merged expositions are compared.
_MULTIPROCESS_RUN = """
import sys, time
from gateway.metering.metrics import GatewayMetrics
from tests.gateway import test_metrics_done as t
metrics = GatewayMetrics()
assert metrics.multiprocess_dir
for _round in range(2):
    for record, latency in t._records():
        time.monotonic = lambda latency=latency: latency  # record.started is 0
        if sys.argv[1] == "fast":
            metrics.observe_done(record)
        else:
            t._reference_observe_done(metrics, record)
for seconds in (0.0, 0.3, 200.0):
    metrics.observe_queue_wait(seconds) if sys.argv[1] == "fast" else metrics.queue_wait.observe(seconds)
sys.stdout.write("\\n".join(t._exposition(metrics)))
"""


def test_in_multiprocess_mode_observe_done_exposes_what_the_public_api_exposes(tmp_path):
    import os
    import subprocess
    import sys

    from bench._procs import REPO_ROOT

    outputs = []
    for way in ("fast", "reference"):
        directory = tmp_path / way
        directory.mkdir()
        done = subprocess.run([sys.executable, "-c", _MULTIPROCESS_RUN, way], cwd=REPO_ROOT, timeout=120,
                              capture_output=True, text=True, check=True,
                              env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)})
        outputs.append(sorted(done.stdout.splitlines()))  # the merge's order of series follows its file listing
    assert outputs[0] == outputs[1]
    text = "\n".join(outputs[0])
    assert "switchyard_gateway_ttft_seconds_bucket" in text and "switchyard_gateway_queue_wait_seconds_count" in text
