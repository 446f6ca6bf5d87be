"""`python -m gateway --workers 2`: one view of the metrics, whichever worker answers the scrape.

Real processes end to end (bench/_fleet.py's fixture: a throwaway SQLite var dir, a simulator engine,
the gateway CLI with its own /metrics listener). Requests go over fresh connections, so both workers
serve some (tests/gateway_app/test_workers.py shows the spread); scrapes go over fresh connections too.
"""
from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from bench._fleet import Fleet, redis_problem, redis_url
from bench._procs import Processes

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(redis_problem(redis_url()) is not None, reason="needs Redis")]
REQUESTS = 30


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gateway-tmp")  # where the supervisor makes its metrics directory
    with Processes() as procs:
        fleet = Fleet(procs, model="metrics-coder")
        fleet.env = lambda: {**Fleet.env(fleet), "TMPDIR": str(tmp)}
        try:
            fleet.start_simulator("--prefill-ms-per-token", "0", "--decode-ms-per-token", "0")
            fleet.create_rows(key_rpm=10_000)
            proc, url = fleet.extra_gateway(workers=2)
            yield fleet, url, fleet.metrics_urls[proc.pid], tmp
        finally:
            fleet.cleanup()


def send(fleet: Fleet, url: str, count: int) -> set[int]:
    """`count` completions, each on a fresh connection; the workers that answered (their /healthz pid)."""
    body = {"model": fleet.model, "prompt": "def add(a, b):", "max_tokens": 2}
    pids = set()
    for _ in range(count):
        with httpx.Client(timeout=30, headers={"authorization": f"Bearer {fleet.key}"}) as client:
            assert client.post(url + "/v1/completions", json=body).status_code == 200
            pids.add(client.get(url + "/healthz").json()["worker_pid"])  # same connection, same worker
    return pids


def scrape(metrics_url: str) -> tuple[int, dict[str, float]]:
    """One scrape on a fresh connection: the answering worker's pid, and the series we compare."""
    response = httpx.get(metrics_url, timeout=10)
    assert response.status_code == 200
    found = {"requests": 0.0, "latency_count": 0.0, "prompt_tokens": 0.0}
    for line in response.text.splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith("switchyard_gateway_requests_total{") and 'status="200"' in name:
            found["requests"] += float(value)
        elif name.startswith("switchyard_gateway_request_seconds_count{"):
            found["latency_count"] += float(value)
        elif name.startswith("switchyard_gateway_tokens_total{") and 'kind="prompt"' in name:
            found["prompt_tokens"] += float(value)
    return int(response.headers["x-switchyard-worker-pid"]), found


def scrapes_until_both_answered(metrics_url: str, most: int = 200) -> dict[int, list[dict]]:
    """Scrape until both workers have answered at least twice (or `most` scrapes): results by worker."""
    by_worker: dict[int, list[dict]] = {}
    for _ in range(most):
        pid, found = scrape(metrics_url)
        by_worker.setdefault(pid, []).append(found)
        if len(by_worker) == 2 and all(len(seen) >= 2 for seen in by_worker.values()):
            break
    return by_worker


def test_every_scrape_counts_every_request_whichever_worker_answers(two_workers):
    fleet, url, metrics_url, _ = two_workers
    assert len(send(fleet, url, REQUESTS)) == 2  # both workers served some of them
    by_worker = scrapes_until_both_answered(metrics_url)
    assert len(by_worker) == 2, f"only worker {set(by_worker)} answered the scrapes"
    every = [found for seen in by_worker.values() for found in seen]
    assert all(found == every[0] for found in every), every
    assert every[0]["requests"] == REQUESTS and every[0]["latency_count"] == REQUESTS
    assert every[0]["prompt_tokens"] > 0


def test_the_public_port_serves_no_metrics(two_workers):
    _, url, _, _ = two_workers
    assert httpx.get(url + "/metrics", timeout=10).status_code == 404


def test_a_worker_killed_and_replaced_leaves_the_counts_whole(two_workers):
    fleet, url, metrics_url, tmp = two_workers
    (directory,) = tmp.glob("switchyard-gateway-metrics-*")  # the supervisor's own, in its TMPDIR
    _, before = scrape(metrics_url)
    killed = next(iter(send(fleet, url, 4)))
    os.kill(killed, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the supervisor has started its replacement
        try:
            pids = {httpx.get(url + "/healthz", timeout=5).json()["worker_pid"] for _ in range(20)}
        except httpx.HTTPError:
            pids = set()
        if len(pids) == 2 and killed not in pids:
            break
        time.sleep(0.5)
    else:
        raise AssertionError("the killed worker was not replaced")
    after = [scrape(metrics_url)[1] for _ in range(10)]
    # The killed worker's requests stay counted (its files are read like a live worker's) ...
    assert all(found["requests"] == before["requests"] + 4 for found in after), (before, after)
    # ... and it was marked dead: its live gauges' files are gone, so they no longer count.
    assert (directory / f"counter_{killed}.db").exists()
    assert not list(directory.glob(f"gauge_live*_{killed}.db"))
    assert list(directory.glob("gauge_livesum_*.db"))  # the live workers' are there
