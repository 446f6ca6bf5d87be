"""Supersession across gateway processes: `python -m gateway --workers 2`, a session's keystrokes landing on
both workers. Real processes end to end (bench/_fleet.py: a throwaway SQLite var dir, a simulator engine
with modelled decode time, the gateway CLI)."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from bench._fleet import Fleet, redis_problem, redis_url
from bench._procs import Processes
from bench._typing import SESSION, Keystroke, Typist, metric

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(redis_problem(redis_url()) is not None, reason="needs Redis")]


@pytest.fixture(scope="module")
def two_workers():
    with Processes() as procs:
        fleet = Fleet(procs, model="typing-coder")
        try:
            engine = fleet.start_simulator("--decode-ms-per-token", "30", "--prefill-ms-per-token", "0.05",
                                           "--max-num-seqs", "32")
            fleet.create_rows()
            _, url = fleet.extra_gateway(workers=2)
            yield fleet, url, engine
        finally:
            fleet.cleanup()


def client_on_each_worker(url: str) -> dict[int, httpx.Client]:
    """A kept-alive connection to each worker (its /healthz names the worker that holds the connection)."""
    found: dict[int, httpx.Client] = {}
    for _ in range(200):
        client = httpx.Client(timeout=60)
        pid = client.get(url + "/healthz").json()["worker_pid"]
        if pid in found:
            client.close()
        else:
            found[pid] = client
        if len(found) == 2:
            return found
    raise AssertionError("connections never reached a second worker")


def wait_subscribed(fleet: Fleet, url: str, timeout: float = 30.0) -> None:
    """Until both workers say (in /healthz) that they hear their supersession channel."""
    subscribed: dict[int, bool] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (len(subscribed) == 2 and all(subscribed.values())):
        with httpx.Client(timeout=5) as client:  # a new connection: either worker
            health = client.get(url + "/healthz").json()
        subscribed[health["worker_pid"]] = health["supersession_subscribed"]
    assert len(subscribed) == 2 and all(subscribed.values()), subscribed


def test_a_keystroke_on_one_worker_supersedes_the_request_running_on_the_other(two_workers):
    fleet, url, engine = two_workers
    wait_subscribed(fleet, url)
    clients = list(client_on_each_worker(url).values())
    typist = Typist(url, fleet.key, fleet.model, headers={SESSION: "cross-worker"}, max_tokens=64)
    first, second = Keystroke(0), Keystroke(1)
    try:
        thread = threading.Thread(target=typist.send, args=(clients[0], "def f():\n    return ", first))
        thread.start()
        time.sleep(0.5)  # the first is generating on worker one
        typist.send(clients[1], "def f():\n    return 1", second)
        thread.join(60)
    finally:
        for client in clients:
            client.close()
    assert second.completed, second
    assert first.superseded and first.tokens < 64, first


def test_twenty_keystrokes_over_two_workers_leave_only_the_last(two_workers):
    fleet, url, engine = two_workers
    wait_subscribed(fleet, url)
    aborted_before = metric(httpx.get(engine + "/metrics").text, "vllm:request_success", finished_reason="abort")
    typist = Typist(url, fleet.key, fleet.model, headers={SESSION: "two-workers"}, max_tokens=64)
    strokes = typist.type("total = ", "sum(values) + 12345", gap=0.05)
    last = strokes[-1]
    assert last.completed, "\n".join(map(str, strokes))
    for stroke, following in zip(strokes, strokes[1:]):
        assert stroke.superseded or (stroke.completed and stroke.ended_at <= following.sent_at), stroke
    superseded = sum(1 for s in strokes if s.superseded)
    assert superseded >= 15
    text = httpx.get(engine + "/metrics").text
    assert metric(text, "vllm:request_success", finished_reason="abort") - aborted_before >= sum(
        1 for s in strokes if s.superseded and s.tokens)
