"""A blue-green rollout between two versions of tiny-coder on real vLLM engines, under a steady load from the
official `openai` client through the real gateway, then an instant rollback (issue 17).

Version A is the tiny model with the registry's engine args; version B is the same weights with
`max_num_seqs` 4 instead of 8 (an engine-flag upgrade, checked on B's running engine's command line). A
real Celery worker with beat runs reconcile, health checks and the rollout stepper; the gateway runs in
this process. At most two engines run at once (A and B). The load — threads of completions and chat,
streamed and not, each request with a distinct prompt — runs through the whole journey and every request
must succeed:

1. B is brought up warm (started, healthy, not routed: no request reaches it before the switch), then all
   traffic moves at once, B bakes with its gates holding and is promoted; A stays warm (its grace period).
2. `manage.py rollback` within the grace period: A was still warm, so no engine starts, and traffic is back
   on A within about a second of the call (printed: the call, the gateway's snapshot, the first token).

The gates' TTFT thresholds are loosened here: eight sessions share this host's two cores, so a p95 of a few
hundred milliseconds may move by more than the default 1.2× + 50 ms between two minutes for reasons that
are not B's. The gates themselves are tested on simulators (tests/gateway_app/test_rollout_traffic.py).
"""
from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from audit.models import AuditEvent
from fleet import services as fleet_services
from fleet.models import Deployment, Instance, InstanceRole
from fleet.states import InstanceState
from fleet.transitions import FLEET
from rollouts import services
from rollouts.models import Rollout, RolloutState
from tests.fleet.conftest import engine_pids
from tests.fleet.fleet_helpers import wait_until
from tests.fleet.test_fleet_vllm import MODEL_DIR, celery_worker, ensure_tiny_model  # noqa: F401  (a fixture)
from tests.gateway_app.helpers import generous_key
from tests.processes import ENGINE_PYTHON

S, R = InstanceState, RolloutState
MODEL = "tiny-coder"
LOAD_THREADS = 4  # completions and chat, streamed and not: one of each
LOAD_GATES = {"min_requests": 20, "ttft_p95_ratio": 3.0, "ttft_p95_margin_ms": 500.0}

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the worker process needs a shared PostgreSQL DB"),
    pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason="no .venv-engine (make engine)"),
]


@dataclass
class Answer:
    kind: str
    started: float  # wall clock (epoch seconds), comparable with usage rows
    ended: float
    error: str = ""


class OpenAILoad:
    """LOAD_THREADS closed-loop clients of the official `openai` SDK (no retries) until stopped."""

    KINDS = ("completion", "completion-stream", "chat", "chat-stream")

    def __init__(self, base_url: str, key: str):
        from openai import OpenAI

        self.client = OpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0, timeout=120,
                             default_headers={"x-switchyard-cache": "no"})
        self.answers: list[Answer] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(kind,), daemon=True, name=f"load-{kind}")
                        for kind in self.KINDS[:LOAD_THREADS]]

    def __enter__(self) -> "OpenAILoad":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=180)

    def failures(self) -> list[Answer]:
        return [a for a in list(self.answers) if a.error]

    def _run(self, kind: str) -> None:
        while not self.stop.is_set():
            started = time.time()
            try:
                error = self._one(kind)
            except Exception as exc:  # every failure the SDK raises counts; the test prints them
                error = f"{type(exc).__name__}: {exc}"[:300]
            self.answers.append(Answer(kind, started, time.time(), error))
            time.sleep(0.2)  # steady, not saturating: B's engine starts on the same two cores

    def _one(self, kind: str) -> str:
        """One request; '' when it completed with tokens and usage, else what was wrong."""
        prompt = f"def f_{uuid.uuid4().hex}(items):"
        streamed, chat = kind.endswith("stream"), kind.startswith("chat")
        options = {"model": MODEL, "max_tokens": 16, "stream": streamed}
        if streamed:
            options["stream_options"] = {"include_usage": True}
        if chat:
            result = self.client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **options)
        else:
            result = self.client.completions.create(prompt=prompt, **options)
        if not streamed:
            return "" if result.usage and result.usage.completion_tokens > 0 else "no tokens"
        finished, usage = None, None
        for chunk in result:
            finished = next((c.finish_reason for c in chunk.choices if c.finish_reason), finished)
            usage = chunk.usage or usage
        return "" if finished and usage and usage.completion_tokens > 0 else f"stream ended early ({finished})"


def version_b(a):
    """The same tiny weights with another engine flag: a new version of the model, published."""
    from models_registry.services import create_version, publish_version

    args = {**a.engine_args, "max_num_seqs": 4}
    draft = create_version(model=a.model, version=f"v{a.model.versions.count() + 1}-seqs4",
                           artifact_uri=a.artifact_uri, dtype=a.dtype, engine_args=args, actor=FLEET)
    return publish_version(draft, actor=FLEET)


def engines_of(deployment_id: int, version_id: int, role: str | None = None) -> list[Instance]:
    rows = Instance.objects.filter(deployment_id=deployment_id, model_version_id=version_id, state=S.READY)
    return list(rows.filter(role=role) if role else rows)


def cmdline(instance: Instance) -> str:
    """The command lines of the instance's engine processes, joined."""
    return " ".join(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                    for pid in engine_pids().get(instance.pk, ()))


def leaders() -> dict[int, int]:
    """Instance id → its engine's leader pid, for every engine of this run that is up."""
    return {pk: pid for pk, pid in Instance.objects.filter(pk__in=engine_pids()).values_list(
        "pk", "runtime_handle__pid")}


def routed(server, deployment_id: int) -> tuple[frozenset[int], tuple]:
    """(instance ids, version weights) of the deployment's pool in the gateway's current snapshot."""
    for pool in server.app.state.snapshot.pools.get(MODEL, ()):
        if pool.deployment_id == deployment_id:
            return frozenset(u.instance_id for u in pool.upstreams), pool.version_weights
    return frozenset(), ()


def first_token_at(row) -> float:
    """When a request's first token went out (its usage row records when it finished)."""
    return row.occurred_at.timestamp() - ((row.latency_ms or 0) - (row.ttft_ms or 0)) / 1000


def served_by(instance_ids, since: float = 0.0) -> list:
    from tests.gateway_app.helpers import usage_rows

    return [r for r in usage_rows(status_code=200) if r.instance_id in instance_ids
            and r.occurred_at.timestamp() >= since]


@pytest.fixture
def patient_engine_start(monkeypatch):
    """The worker's engine start deadline (10 min in the fleet journey's worker) raised to 15: B starts beside A
    under load on a 2-core host (133 s here, unpinned; over 15 min while vLLM pinned both to core 0). And engines
    are admitted on memory alone: host admission counts the cores every install's engines claim, and other
    sessions' engines on this 2-core host held both, so B waited for capacity instead of starting (memory is
    still checked)."""
    from tests.fleet import test_fleet_vllm

    original = test_fleet_vllm.worker_env
    monkeypatch.setattr(test_fleet_vllm, "worker_env", lambda queue, log_dir: {
        **original(queue, log_dir), "SWITCHYARD_FLEET_START_DEADLINE_SECONDS": "900",
        "SWITCHYARD_ROLLOUT_START_DEADLINE_SECONDS": "900", "SWITCHYARD_ENGINE_CPUS": "0"})


# A gate since 2026-12-06: B's engine never finished starting beside A's while vLLM pinned both to core 0
# (controlplane/cpu_engine_env.py); unpinned, B was warm 133 s after the rollout started and the test passed.
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("patient_engine_start", "celery_worker")
def test_blue_green_between_two_vllm_versions_then_an_instant_rollback_under_openai_load(tenant_a):
    from models_registry.services import ensure_tiny_coder
    from tests.gateway_app.helpers import GatewayServer

    ensure_tiny_model()
    key = generous_key(tenant_a)
    a = ensure_tiny_coder(model_dir=Path(settings.SWITCHYARD_MODEL_ROOT) / MODEL_DIR, actor=FLEET)
    b = version_b(a)
    deployment = fleet_services.create_deployment(tenant=tenant_a, name="tiny-bg", model_version=a, actor=FLEET,
                                                  runtime_backend="local", min_replicas=1, max_replicas=1)
    a_engine = wait_until(lambda: engines_of(deployment.pk, a.pk, InstanceRole.SERVING), "A's engine ready",
                          timeout=900, interval=1)[0]
    gateway = GatewayServer.start()
    try:
        gateway.wait_until_serving(key, MODEL, timeout=30)
        with OpenAILoad(gateway.url, key) as load:
            wait_until(lambda: len(served_by({a_engine.pk})) >= 20, "A serving the load", timeout=300)

            # 1. Blue-green: B up warm first, then 100 % at once, baked under its gates, promoted.
            started = time.time()
            rollout = services.start_rollout(Deployment.objects.get(pk=deployment.pk), to_version=b,
                                             actor=FLEET, strategy="blue-green", gates=LOAD_GATES,
                                             stages=[{"weight": 1.0, "bake_seconds": 30}])
            # Hang guard only (B warm after 133 s in the passing runs).
            b_engine = wait_until(lambda: engines_of(deployment.pk, b.pk), "B's engine ready (warm)",
                                  timeout=900, interval=1)[0]
            # Created warm (the stepper may already have ramped it by now: the role is read from the audit trail).
            created = AuditEvent.objects.get(action="fleet.instance.create", target_id=str(b_engine.pk))
            assert created.after["role"] == InstanceRole.WARM and "--max-num-seqs 4" in cmdline(b_engine)
            assert "--max-num-seqs 8" in cmdline(a_engine)
            ramp = wait_until(lambda: AuditEvent.objects.filter(action="rollout.ramp",
                                                                target_id=str(rollout.pk)).first(),
                              "the switch to B", timeout=120, interval=0.5)
            switched = ramp.occurred_at.timestamp()
            wait_until(lambda: Rollout.objects.get(pk=rollout.pk).state != R.RAMPING, "B judged", timeout=300)
            promoted = Rollout.objects.get(pk=rollout.pk)
            assert promoted.state == R.PROMOTED, (promoted.state_reason, promoted.last_evaluation)
            wait_until(lambda: len(served_by({b_engine.pk}, promoted.promoted_at.timestamp())) >= 10,
                       "B serving after its promotion", timeout=120)
            # Nothing reached B before the switch: it was warm, not routed (first tokens, not finish times).
            early = [r for r in served_by({b_engine.pk}) if first_token_at(r) < switched - 0.5]
            assert early == [], [(r.request_id, r.occurred_at) for r in early]
            # A stayed up through its grace period: warm, the same engine.
            a_now = Instance.objects.get(pk=a_engine.pk)
            assert (a_now.state, a_now.role) == (S.READY, InstanceRole.WARM)
            pids_before = leaders()
            assert set(pids_before) == {a_engine.pk, b_engine.pk} == set(engine_pids())
            engines_before = Instance.objects.filter(deployment_id=deployment.pk).count()

            # 2. Rollback within the grace period: a routing change, no engine start.
            called = time.time()
            call_command("rollback", f"{tenant_a.slug}/tiny-bg", "--reason", "rollback drill")
            returned = time.time()
            reverse = Rollout.objects.get(reverses=promoted)
            assert (reverse.state, reverse.weight) in ((R.RAMPING, 1.0), (R.PROMOTED, 1.0))  # moved in the call
            wait_until(lambda: routed(gateway, deployment.pk)[0] == {a_engine.pk}, "the gateway routing A only",
                       timeout=60, interval=0.01)
            in_gateway = time.time()
            on_a = wait_until(lambda: [r for r in served_by({a_engine.pk}) if first_token_at(r) >= called],
                              "a first token from A after the rollback", timeout=60, interval=0.05)
            first_on_a = min(first_token_at(r) for r in on_a)
            wait_until(lambda: len(served_by({a_engine.pk}, in_gateway)) >= 20, "A serving the load", timeout=120)
            wait_until(lambda: Rollout.objects.get(pk=reverse.pk).state == R.PROMOTED, "the reverse promoted",
                       timeout=120)
        failures = load.failures()
        kinds = Counter(answer.kind for answer in load.answers)
    finally:
        gateway.stop()

    reverse = Rollout.objects.get(pk=reverse.pk)
    # The same engine processes (leader pids) and no other: nothing started, nothing restarted.
    assert leaders() == pids_before and set(engine_pids()) == set(pids_before)
    assert Instance.objects.filter(deployment_id=deployment.pk).count() == engines_before
    assert not AuditEvent.objects.filter(action="fleet.instance.create", occurred_at__gte=ramp.occurred_at).exists()
    assert Deployment.objects.get(pk=deployment.pk).model_version_id == a.pk
    late_on_b = [r for r in served_by({b_engine.pk}) if first_token_at(r) > in_gateway + 0.5]
    assert late_on_b == []
    total = sum(kinds.values())
    print(f"\nload: {total} requests from the openai client ({dict(kinds)}), {len(failures)} failed")
    print(f"blue-green: B warm {ramp.occurred_at.timestamp() - started:.1f} s after the start, all traffic moved "
          f"at once, promoted {promoted.promoted_at.timestamp() - switched:.1f} s after the switch "
          f"(bake 30 s); B served {len(served_by({b_engine.pk}))} requests, A {len(served_by({a_engine.pk}))}")
    print(f"rollback ({reverse.state}): the command returned after {returned - called:.3f} s, the gateway routed "
          f"only A {in_gateway - called:.3f} s after the call, the first token from A {first_on_a - called:.3f} s "
          f"after it; engines started: 0")
    assert failures == [], failures[:5]
    assert total >= 100 and all(kinds[kind] > 0 for kind in OpenAILoad.KINDS[:LOAD_THREADS])
