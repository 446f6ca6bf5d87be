"""Autoscaling end to end on real vLLM engines (tiny model), a real Celery worker + beat and the gateway.

One journey, so the two engines start once: a deployment asleep at zero wakes on a request from the
official `openai` client (served; its wait in `x-switchyard-wake-ms` and the usage record) and comes up
as one serving and one warm engine; a burst raises the serving engine's queue, the autoscaler promotes
the warm engine, which serves within seconds; idle brings it back down (the promoted engine goes back
to the pool) and, with no request at all, to zero — every engine stopped. At most two engines run at
once (max_replicas 2), so the pool cannot refill behind the promotion here: reconcile's refill is
covered on simulators (tests/fleet/test_roles.py and test_reconcile_simulator.py).
"""
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection

from audit.models import AuditEvent
from fleet import services
from fleet.models import Deployment, Instance, InstanceRole, ScalingDecision
from fleet.states import InstanceState
from fleet.transitions import FLEET
from tests.fleet.conftest import engine_pids
from tests.fleet.fleet_helpers import wait_until
from tests.fleet.test_fleet_vllm import MODEL_DIR, celery_worker, ensure_tiny_model  # noqa: F401  (a fixture)
from tests.processes import ENGINE_PYTHON

S = InstanceState
MODEL = "tiny-coder"
PROMOTION_BOUND_SECONDS = 5.0  # the product bound (issue 16); asserted with slack for a loaded 2-core machine
BURST_CLIENTS = 24  # three times the engine's max_num_seqs (8): the rest wait in its queue

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the worker process needs a shared PostgreSQL DB"),
    pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason="no .venv-engine (make engine)"),
]


def sleeping_deployment(tenant) -> Deployment:
    from models_registry.services import ensure_tiny_coder

    version = ensure_tiny_coder(model_dir=Path(settings.SWITCHYARD_MODEL_ROOT) / MODEL_DIR, actor=FLEET)
    deployment = services.create_deployment(tenant=tenant, name="tiny-auto", model_version=version, actor=FLEET,
                                            runtime_backend="local", min_replicas=0, max_replicas=2, warm_pool_size=1)
    # The production rules with windows and cooldowns shortened so the journey takes minutes, not hours
    # (the idle period before zero stays long until the burst is over: see step 4).
    services.set_scaling_policy(deployment, actor=FLEET, enabled=True, queue_per_instance=2, up_window_seconds=5,
                                cooldown_up_seconds=5, idle_window_seconds=15, cooldown_down_seconds=10,
                                low_water_per_instance=1.0, zero_after_idle_seconds=900,
                                wake_timeout_seconds=COLD_START_WAIT_SECONDS)
    return Deployment.objects.get(pk=deployment.pk)


def by_role(deployment_id: int, role: str) -> list[Instance]:
    return list(Instance.objects.filter(deployment_id=deployment_id, state=S.READY, role=role))


def first_token_at(row) -> float:
    """When a request's first token went out (the usage row records when it finished)."""
    return row.occurred_at.timestamp() - (row.latency_ms - row.ttft_ms) / 1000


class Burst:
    """BURST_CLIENTS closed-loop clients of long streamed completions through the gateway, until stopped."""

    def __init__(self, gateway_url: str, key: str):
        self.url, self.key = gateway_url + "/v1/completions", key
        self.stop = threading.Event()
        self.answers: list[int] = []
        self.errors: list[tuple[float, int, bytes]] = []  # (when, status, body) of every answer but a 200
        self.pool = ThreadPoolExecutor(BURST_CLIENTS)

    def __enter__(self):
        self.clients = [self.pool.submit(self._client) for _ in range(BURST_CLIENTS)]
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.pool.shutdown(wait=True)
        for client in self.clients:
            client.result()  # a client that crashed fails the journey

    def _client(self) -> None:
        # Streamed, so a usage record's TTFT is the first token, not the end of a 400-token answer.
        body = {"model": MODEL, "prompt": "def quicksort(items):", "max_tokens": 400, "ignore_eos": True,
                "stream": True}
        with httpx.Client(timeout=120, headers={"authorization": f"Bearer {self.key}"}) as client:
            while not self.stop.is_set():
                with client.stream("POST", self.url, json=body) as answer:
                    text = answer.read()
                    # A stream that failed after its 200 went out ends with an error event: not an answer either.
                    failed = answer.status_code != 200 or b'data: {"error"' in text or b"data: [DONE]" not in text
                    self.answers.append(500 if failed and answer.status_code == 200 else answer.status_code)
                    if failed:
                        self.errors.append((time.time(), answer.status_code, text[-500:]))


# The worker as on a loaded 2-core host (CI runs this after the whole suite; other sessions share the cores):
# engines may take minutes past vLLM's ~45 s to start, and a busy engine's /health may answer slower than the
# product's 2-s probe timeout. Neither is what this journey proves, so neither may end it.
LOADED_HOST = {"SWITCHYARD_FLEET_START_DEADLINE_SECONDS": "1200", "SWITCHYARD_FLEET_PROBE_TIMEOUT_SECONDS": "5"}
COLD_START_WAIT_SECONDS = 1500


def demand_report(deployment) -> str:
    """What the autoscaler saw (its latest samples) and each instance's health, for a failure message."""
    from fleet.models import DemandSample

    samples = [(f"{s.at:%H:%M:%S}", s.serving, s.warm, s.waiting, s.running)
               for s in DemandSample.objects.filter(deployment=deployment).order_by("-at")[:12]]
    instances = list(Instance.objects.filter(deployment=deployment).values_list(
        "pk", "role", "state", "last_health_at", "last_health_error", "failure_reason"))
    return f"samples (at, serving, warm, waiting, running), newest first: {samples}; instances: {instances}"


def burst_report(burst: "Burst", gateway, deployment) -> str:
    """Every answer but a 200 and what the gateway counted (failed engine calls by kind, retries)."""
    from tests.gateway_app.helpers import usage_rows

    failed = [(f"{r.occurred_at:%H:%M:%S.%f}", r.status_code, r.outcome, r.instance_id, r.retried_instance_id,
               r.ttft_ms) for r in usage_rows(model_name=MODEL) if r.status_code >= 500 or r.outcome != "ok"]
    counted = [line for line in gateway.metrics().splitlines()
               if line.startswith(("switchyard_gateway_upstream_errors", "switchyard_gateway_retries",
                                   "switchyard_gateway_ejections"))]
    return f"answers: {burst.errors}; usage rows: {failed}; gateway: {counted}; {demand_report(deployment)}"


# A gate since 2026-12-06: it had failed on a host where vLLM pinned every engine to core 0 (controlplane/
# cpu_engine_env.py); unpinned it passed in three runs in a row (once with the rest of the suite beside it).
@pytest.mark.parametrize("celery_worker", [LOADED_HOST], indirect=True, ids=["loaded-host"])
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("celery_worker")
def test_wake_from_zero_promote_a_warm_engine_in_a_burst_then_back_down_to_zero(tenant_a):
    from openai import OpenAI

    from tests.gateway_app.helpers import GatewayServer, generous_key, usage_rows

    ensure_tiny_model()
    key = generous_key(tenant_a)
    deployment = sleeping_deployment(tenant_a)
    assert deployment.serving_target == 0 and engine_pids() == {}
    gateway = GatewayServer.start()
    try:
        gateway.wait_until_serving(key, MODEL)  # listed while asleep: it wakes on request
        client = OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0, timeout=COLD_START_WAIT_SECONDS)

        # 1. A request wakes it: held while the fleet cold-starts an engine, then served.
        woke = client.completions.with_raw_response.create(model=MODEL, prompt="def add(a, b):", max_tokens=8)
        assert woke.http_response.status_code == 200 and woke.parse().usage.completion_tokens > 0
        waited = float(woke.headers["x-switchyard-wake-ms"])
        row = wait_until(lambda: [r for r in usage_rows(model_name=MODEL) if r.wake_wait_ms], "the usage record",
                         timeout=30)[0]
        assert row.wake_wait_ms == pytest.approx(waited, abs=1) and waited > 1000  # a cold start, not a cache hit
        assert ScalingDecision.objects.get(deployment=deployment, rule="wake").to_serving == 1
        print(f"\nwoken from zero: the request waited {waited / 1000:.1f} s (header and usage record)")

        # 2. The pool fills behind it: one warm engine, started and healthy, not routed.
        warm = wait_until(lambda: by_role(deployment.pk, InstanceRole.WARM), "a ready warm engine",
                          timeout=COLD_START_WAIT_SECONDS)[0]
        serving = by_role(deployment.pk, InstanceRole.SERVING)[0]
        assert set(engine_pids()) == {warm.pk, serving.pk}

        # 3. A burst queues on the serving engine; the autoscaler promotes the warm one, which serves at once.
        with Burst(gateway.url, key) as burst:
            # The queue rule, or its surge form (at twice the threshold it acts after two looks, not a window).
            up = wait_until(lambda: ScalingDecision.objects.filter(deployment=deployment, action="up",
                                                                   rule__in=("queue", "surge")).first(),
                            lambda: f"a scale-up on the engine's queue; {demand_report(deployment)}", timeout=420)
            served = wait_until(lambda: usage_rows(model_name=MODEL, instance_id=warm.pk, outcome="ok",
                                                   ttft_ms__isnull=False),
                                lambda: f"the promoted engine serving; {burst_report(burst, gateway, deployment)}",
                                timeout=60)
        assert set(burst.answers) == {200}, burst_report(burst, gateway, deployment)
        # The rule read the whole up-window's queue (its reason); `signals` is only the latest sample.
        assert (up.from_serving, up.to_serving) == (1, 2) and "waiting per instance" in up.reason, up.reason
        promotion = first_token_at(min(served, key=first_token_at)) - up.decided_at.timestamp()
        promoted = AuditEvent.objects.get(action="fleet.instance.promote", target_id=str(warm.pk)).occurred_at
        print(f"burst: {up.signals['waiting']:.0f} waiting on the serving engine; decision → promoted (audited) "
              f"{(promoted - up.decided_at).total_seconds():.2f} s → first token from the promoted engine "
              f"{promotion:.2f} s (bound {PROMOTION_BOUND_SECONDS:g} s)")
        assert promotion < 3 * PROMOTION_BOUND_SECONDS
        assert Instance.objects.get(pk=warm.pk).role == InstanceRole.SERVING

        # 4. Idle: one engine back to the pool (still hot), then, with no request at all, down to zero
        #    (the operator shortens the idle period before zero so the journey ends within a minute).
        down = wait_until(lambda: ScalingDecision.objects.filter(deployment=deployment, action="down").first(),
                          "a scale-down when idle", timeout=180)
        assert (down.rule, down.from_serving, down.to_serving) == ("idle", 2, 1)
        wait_until(lambda: len(by_role(deployment.pk, InstanceRole.SERVING)) == 1
                   and len(by_role(deployment.pk, InstanceRole.WARM)) == 1,
                   "one engine demoted to the pool (it had room), not stopped", timeout=60)
        services.set_scaling_policy(deployment, actor=FLEET, zero_after_idle_seconds=30)
        wait_until(lambda: ScalingDecision.objects.filter(deployment=deployment, rule="scale-to-zero").exists(),
                   "scale-to-zero after the idle period", timeout=240)
        wait_until(lambda: engine_pids() == {} and not Instance.objects.filter(
            deployment=deployment, state__in=(S.PENDING, S.STARTING, S.READY, S.DRAINING)).exists(),
            "every engine stopped at zero", timeout=180)
    finally:
        gateway.stop()
