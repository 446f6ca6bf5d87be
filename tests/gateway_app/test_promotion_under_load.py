"""Routing changes under load: promoting and demoting an instance while a burst of streaming clients runs
through the real gateway answers every request 200, and the promoted engine takes its share at once.

The class behind the 502 the real-vLLM autoscaling journey saw during a promotion (issue 16): a routing
change moves load between engines, so connections to the engine that lost load sit idle in the gateway's
keep-alive pool, age together past the engine's keep-alive timeout, and are reused when load comes back.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from fleet.models import Instance, InstanceRole
from fleet.transitions import set_role
from tests.gateway_app.conftest import MODEL, wait_for
from tests.gateway_app.helpers import EchoEngine, add_deployment, generous_key, make_model_version, usage_rows
from tests.gateway_app.scripted_engine import ScriptedEngine

pytestmark = pytest.mark.django_db(transaction=True)
CLIENTS = 12
ENGINE_KEEP_ALIVE_SECONDS = 5.0  # the simulator's server, as vLLM's uvicorn: idle connections close after it


class Burst:
    """CLIENTS closed-loop clients of streamed completions through the gateway, until stopped."""

    def __init__(self, url: str, key: str, max_tokens: int):
        self.url, self.key, self.max_tokens = url + "/v1/completions", key, max_tokens
        self.stop = threading.Event()
        self.answers: list[int] = []
        self.errors: list[tuple[int, bytes]] = []
        self.pool = ThreadPoolExecutor(CLIENTS)

    def __enter__(self):
        self.futures = [self.pool.submit(self._client, n) for n in range(CLIENTS)]
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.pool.shutdown(wait=True)
        for future in self.futures:
            future.result()  # a client that crashed fails the test

    def _client(self, n: int) -> None:
        body = {"model": MODEL, "prompt": f"def task_{n % 3}(items):", "max_tokens": self.max_tokens,
                "ignore_eos": True, "stream": True}
        with httpx.Client(timeout=60, headers={"authorization": f"Bearer {self.key}"}) as client:
            while not self.stop.is_set():
                with client.stream("POST", self.url, json=body) as answer:
                    text = answer.read()
                    self.answers.append(answer.status_code)
                    if answer.status_code != 200 or b"[DONE]" not in text:
                        self.errors.append((answer.status_code, text[:300]))


def served_by(instance_id: int, since: float) -> int:
    return sum(1 for row in usage_rows(instance_id=instance_id, status_code=200) if row.occurred_at.timestamp() > since)


def test_promoting_and_demoting_under_a_burst_answers_every_request(gateway, tenant_a, simulators):
    engines = [simulators("--decode-ms-per-token", "4", "--prefill-ms-per-token", "0.01") for _ in range(2)]
    deployment = add_deployment(make_model_version(MODEL), tenant=None, name="promote-under-load",
                                urls=[engine.url for engine in engines])
    serving, warm = (Instance.objects.get(deployment=deployment, endpoint_url=engine.url) for engine in engines)
    set_role(warm.pk, InstanceRole.WARM)
    server = gateway()
    server.wait_synced()
    with Burst(server.url, generous_key(tenant_a), max_tokens=100) as burst:
        for _ in range(2):
            promoted_at = time.time()
            set_role(warm.pk, InstanceRole.SERVING)  # audited: the change bus carries it to the gateway
            assert wait_for(lambda at=promoted_at: served_by(warm.pk, at), timeout=30), "the promoted engine idled"
            # Load is split now: connections to the first engine idle in the gateway's pool past its keep-alive…
            time.sleep(ENGINE_KEEP_ALIVE_SECONDS + 1.5)
            set_role(warm.pk, InstanceRole.WARM)  # …and are wanted again when its load comes back
            demoted_at = time.time()
            assert wait_for(lambda at=demoted_at: served_by(serving.pk, at) >= CLIENTS, timeout=30)
            time.sleep(ENGINE_KEEP_ALIVE_SECONDS + 1.5)  # now the warm engine's connections age in turn
    assert burst.errors == [] and set(burst.answers) == {200}, burst.errors[:5]
    assert len(burst.answers) > 4 * CLIENTS
    failed = [(r.status_code, r.outcome, r.instance_id) for r in usage_rows(model_name=MODEL) if r.status_code >= 500]
    assert failed == []


def test_a_request_whose_only_engine_fails_is_retried_on_an_engine_promoted_meanwhile(gateway, tenant_a):
    """A request that arrived while its deployment had one serving engine, which then failed before answering,
    is retried on the routing of now: an engine promoted in the meantime serves it (before, it got a 502:
    the retry looked only at the engines routable when the request arrived)."""
    failing, promoted = ScriptedEngine(), EchoEngine(MODEL)
    try:
        deployment = add_deployment(make_model_version(MODEL), tenant=None, name="retry-now",
                                    urls=[failing.url, promoted.url])
        warm = Instance.objects.get(deployment=deployment, endpoint_url=promoted.url)
        set_role(warm.pk, InstanceRole.WARM)
        # Without the prefix warm-up: the promoted engine's only request must be the retried one.
        server = gateway(prefix_warmup=0)
        server.wait_synced()
        key = generous_key(tenant_a)
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(server.post, "/v1/completions", key,
                                 {"model": MODEL, "prompt": "closes-after-2s", "max_tokens": 1})
            assert wait_for(lambda: failing.requests.get("closes-after-2s"), timeout=10)
            set_role(warm.pk, InstanceRole.SERVING)  # while the only engine holds the request
            server.wait_synced()
            response = answer.result(timeout=60)
        assert response.status_code == 200, response.text
        assert len(promoted.bodies) == 1
        (row,) = wait_for(lambda: usage_rows(model_name=MODEL), timeout=10)
        assert (row.instance_id, row.retried_instance_id) == (warm.pk, Instance.objects.get(
            deployment=deployment, endpoint_url=failing.url).pk)
    finally:
        failing.stop()
        promoted.stop()
