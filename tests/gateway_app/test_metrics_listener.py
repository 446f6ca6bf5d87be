"""/metrics is served on a listener of its own, never on the public port, and behind a token when one is set."""
from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from bench._procs import REPO_ROOT
from tests.gateway_app.conftest import MODEL

BODY = {"model": MODEL, "prompt": "def add(a, b):", "max_tokens": 2}
TOKEN = "metrics-token-0123456789abcdef"


def requests_counted(text: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("switchyard_gateway_requests_total{"))


def test_the_public_port_does_not_serve_metrics(served):
    response = httpx.get(served.gateway.url + "/metrics", timeout=10)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert "switchyard_gateway" not in response.text


def test_the_metrics_listener_counts_what_the_public_port_served(served):
    for _ in range(3):
        assert served.gateway.post("/v1/completions", served.alice.key.raw, BODY).status_code == 200
    response = httpx.get(served.gateway.metrics_url, timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert requests_counted(response.text) == 3
    assert 'switchyard_gateway_outstanding_requests{instance="' in response.text


def test_the_metrics_listener_serves_nothing_else(served):
    base = served.gateway.metrics_url.removesuffix("/metrics")
    assert httpx.get(base + "/v1/models", headers={"authorization": f"Bearer {served.alice.key.raw}"},
                     timeout=10).status_code == 404
    assert httpx.post(base + "/v1/completions", json=BODY, timeout=10).status_code == 404
    assert httpx.post(served.gateway.metrics_url, timeout=10).status_code == 405


def test_with_a_token_only_its_holder_may_scrape(settings, gateway, alice, shared_pool):
    settings.SWITCHYARD_METRICS_TOKEN = TOKEN
    server = gateway()
    server.wait_until_serving(alice.key.raw, MODEL)
    url = server.metrics_url
    refused = [httpx.get(url, timeout=10, headers=headers) for headers in (
        {}, {"authorization": "Bearer wrong-token-0123456789abcdef"}, {"authorization": TOKEN},
        {"authorization": f"Bearer {alice.key.raw}"})]  # an API key is no metrics token
    assert [response.status_code for response in refused] == [401, 401, 401, 401]
    assert all("switchyard_gateway" not in response.text for response in refused)
    assert refused[0].headers["www-authenticate"].startswith("Bearer")
    assert server.post("/v1/completions", alice.key.raw, BODY).status_code == 200
    assert requests_counted(server.metrics(authorization=f"Bearer {TOKEN}")) == 1


def test_a_short_token_stops_the_start(tmp_path):
    done = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=REPO_ROOT, timeout=60,
                          capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "controlplane.settings",
                               "SWITCHYARD_VAR_DIR": str(tmp_path), "SWITCHYARD_METRICS_TOKEN": "short"})
    assert done.returncode != 0 and "SWITCHYARD_METRICS_TOKEN" in done.stderr


@pytest.mark.parametrize("path", ["/metrics", "/metrics/", "/METRICS"])
def test_no_spelling_of_metrics_reaches_it_on_the_public_port(served, path):
    assert httpx.get(served.gateway.url + path, timeout=10).status_code == 404
