"""The health probe: /health decides whether an engine is healthy; a slow or broken /metrics only means no
new figures. A busy engine renders its metrics slowly, and counting that as a failed probe took healthy
engines out of service exactly under load (issue 16's real-vLLM journey)."""
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from fleet.health import probe

METRICS = b'vllm:num_requests_waiting{model_name="m"} 5.0\nvllm:num_requests_running{model_name="m"} 3.0\n'


class StandIn:
    """An engine stand-in on a loopback port: /health answers `health`; /metrics `metrics` after `delay` s."""

    def __init__(self, health: int = 200, metrics: bytes = METRICS, delay: float = 0.0):
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path == "/metrics":
                    time.sleep(stand_in.delay)
                    status, body = 200, stand_in.metrics
                else:
                    status, body = stand_in.health, b""
                self.send_response(status)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.health, self.metrics, self.delay = health, metrics, delay
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def client():
    with httpx.Client(timeout=httpx.Timeout(0.5, connect=0.5)) as client:
        yield client


def test_a_healthy_engine_reports_its_queue(client):
    with StandIn() as engine:
        result = probe(engine.url, client)
    assert result.ok and result.metrics["num_requests_waiting"] == 5 and result.metrics["num_requests_running"] == 3


def test_metrics_slower_than_the_probe_timeout_are_no_figures_not_a_failed_probe(client):
    with StandIn(delay=2.0) as engine:
        result = probe(engine.url, client)
    assert (result.ok, result.error, result.metrics) == (True, "", None)


def test_metrics_that_do_not_parse_are_no_figures_not_a_failed_probe(client):
    with StandIn(metrics=b"vllm:num_requests_waiting{unclosed 1\n") as engine:
        result = probe(engine.url, client)
    assert (result.ok, result.metrics) == (True, None)


def test_health_that_fails_or_does_not_answer_is_a_failed_probe(client):
    with StandIn(health=503) as engine:
        assert probe(engine.url, client).error == "/health answered 503"
    with StandIn() as engine:
        url = engine.url
    result = probe(url, client)  # nothing listens any more
    assert not result.ok and "ConnectError" in result.error
