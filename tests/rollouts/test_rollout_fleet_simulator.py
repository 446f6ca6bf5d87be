"""A rollout driving the real fleet: reconcile starts simulator engines of each version (with that version's
fault flags: error rate, hang after the first byte), moves them between serving and warm as the weights change,
and lets the losing version go."""
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from fleet import services as fleet_services
from fleet.models import BuiltinRuntime, Instance, InstanceRole
from fleet.states import InstanceState
from fleet.transitions import FLEET
from rollouts import services, stepping
from rollouts.models import Rollout, RolloutState
from tests.fleet.conftest import engine_pids, make_version
from tests.fleet.fleet_helpers import converge
from tests.rollouts.conftest import ADMIN

S, R = InstanceState, InstanceRole
FAST = {"prefill_ms_per_token": 0.01, "decode_ms_per_token": 1.0}
pytestmark = pytest.mark.django_db


def ready(deployment, version) -> dict[str, int]:
    """Ready engines of a version by role."""
    rows = Instance.objects.filter(deployment=deployment, model_version=version, state=S.READY)
    return {role: rows.filter(role=role).count() for role in (R.SERVING, R.WARM) if rows.filter(role=role).exists()}


def answers(instance) -> int:
    body = {"model": "tiny-coder", "prompt": "def f():", "max_tokens": 1}
    return httpx.post(instance.endpoint_url.rstrip("/") + "/v1/completions", json=body, timeout=10).status_code


def serving_a(replicas: int, b_faults: dict | None = None):
    """Versions A and B of tiny-coder and a simulator deployment serving A on `replicas` ready engines; B's engines
    get `b_faults` (the simulator's fault injection) when a rollout starts them."""
    a, b = make_version(), make_version(artifact_uri="fleet-tiny-coder-b")
    params = {**FAST, "versions": {b.version: b_faults}} if b_faults else FAST
    deployment = fleet_services.create_deployment(
        tenant=None, name="sim", model_version=a, min_replicas=replicas, max_replicas=replicas,
        runtime_backend=BuiltinRuntime.SIMULATOR, actor=FLEET, simulator_params=params)
    converge(deployment.pk, lambda: ready(deployment, a) == {R.SERVING: replicas})
    return a, b, deployment


def test_a_canary_runs_both_versions_from_their_own_flags_then_the_promoted_one_alone():
    a, b, deployment = serving_a(2, b_faults={"error_rate": 1.0})
    rollout = services.start_rollout(deployment, to_version=b, actor=ADMIN, grace_seconds=3600,
                                     stages=[{"weight": 0.5, "bake_seconds": 900}, {"weight": 1.0, "bake_seconds": 0}])
    converge(deployment.pk, lambda: ready(deployment, b) == {R.WARM: 2})  # up before any traffic moves
    assert stepping.step(rollout.pk) == "ramping"
    converge(deployment.pk, lambda: ready(deployment, b) == {R.SERVING: 1, R.WARM: 1}
             and ready(deployment, a) == {R.SERVING: 1, R.WARM: 1})
    statuses = {version.version: {answers(i) for i in Instance.objects.filter(model_version=version, state=S.READY)}
                for version in (a, b)}
    assert statuses == {a.version: {200}, b.version: {500}}  # B's engines run B's fault flags only
    services.promote_rollout(Rollout.objects.get(pk=rollout.pk), actor=ADMIN)
    converge(deployment.pk, lambda: ready(deployment, b) == {R.SERVING: 2} and ready(deployment, a) == {R.WARM: 2})
    assert stepping.step(rollout.pk) == "idle"  # A stays warm for its grace period …
    Rollout.objects.filter(pk=rollout.pk).update(promoted_at=timezone.now() - timedelta(hours=2))  # … which passes
    assert stepping.step(rollout.pk) == "retired"
    converge(deployment.pk, lambda: ready(deployment, a) == {} and len(engine_pids()) == 2)


def test_a_rollback_keeps_a_serving_throughout_and_stops_b():
    a, b, deployment = serving_a(1)
    a_engine = Instance.objects.get(deployment=deployment, model_version=a, state=S.READY)
    rollout = services.start_rollout(deployment, to_version=b, actor=ADMIN)
    converge(deployment.pk, lambda: ready(deployment, b) == {R.WARM: 1})
    stepping.step(rollout.pk)
    converge(deployment.pk, lambda: ready(deployment, b) == {R.SERVING: 1} and ready(deployment, a) == {R.SERVING: 1})
    services.roll_back_rollout(Rollout.objects.get(pk=rollout.pk), actor=ADMIN)
    converge(deployment.pk, lambda: ready(deployment, b) == {} and len(engine_pids()) == 1)
    a_engine.refresh_from_db()
    assert (a_engine.state, a_engine.role) == (S.READY, R.SERVING)  # the same engine: no restart, no cold start


def test_a_serves_less_as_b_takes_traffic_stays_warm_and_a_rollback_within_grace_starts_no_engine():
    """Capacity during a canary: A's serving engines follow its share (2 → 1 → 0 as B goes 10 → 50 → 100 %), the
    rest of its set stays warm, so undoing the promotion later moves roles only — the same engine processes."""
    a, b, deployment = serving_a(2)
    rollout = services.start_rollout(deployment, to_version=b, actor=ADMIN, gates={"min_requests": 0},
                                     stages=[{"weight": 0.1, "bake_seconds": 0}, {"weight": 0.5, "bake_seconds": 0},
                                             {"weight": 1.0, "bake_seconds": 900}])
    converge(deployment.pk, lambda: ready(deployment, b) == {R.WARM: 2})
    seen = []
    for expected in ("ramping", "advanced", "advanced"):
        assert stepping.step(rollout.pk) == expected
        # The roles moved with the weight, in the same transaction: no reconcile pass needed to see them.
        seen.append((Rollout.objects.get(pk=rollout.pk).weight, ready(deployment, a), ready(deployment, b)))
    assert seen == [(0.1, {R.SERVING: 2}, {R.SERVING: 1, R.WARM: 1}),
                    (0.5, {R.SERVING: 1, R.WARM: 1}, {R.SERVING: 1, R.WARM: 1}),
                    (1.0, {R.WARM: 2}, {R.SERVING: 2})]
    services.promote_rollout(Rollout.objects.get(pk=rollout.pk), actor=ADMIN)
    converge(deployment.pk, lambda: ready(deployment, b) == {R.SERVING: 2} and ready(deployment, a) == {R.WARM: 2})
    pids, rows = engine_pids(), Instance.objects.count()
    assert len(pids) == 4  # A's two engines are kept warm for the grace period beside B's two

    reverse = services.roll_back_rollout(Rollout.objects.get(pk=rollout.pk), actor=ADMIN)
    assert (reverse.state, reverse.weight) == (RolloutState.RAMPING, 1.0)  # moved in the call: A was warm
    assert ready(deployment, a) == {R.SERVING: 2} and ready(deployment, b) == {R.WARM: 2}
    assert stepping.step(reverse.pk) == "promoted"
    converge(deployment.pk, lambda: ready(deployment, a) == {R.SERVING: 2} and ready(deployment, b) == {R.WARM: 2})
    assert (engine_pids(), Instance.objects.count()) == (pids, rows)  # no engine started, none restarted
    assert {answers(i) for i in Instance.objects.filter(model_version=a, state=S.READY)} == {200}


def hangs_after_first_byte(instance) -> bool:
    """The engine sends a stream's first token, then nothing for a second (1 ms a token: 3 would be done)."""
    body = {"model": "tiny-coder", "prompt": "def f():", "max_tokens": 3, "stream": True}
    with httpx.stream("POST", instance.endpoint_url.rstrip("/") + "/v1/completions", json=body,
                      timeout=httpx.Timeout(10, read=1.0)) as response:
        events = (line for line in response.iter_lines() if line.startswith("data: "))
        assert next(events).startswith("data: {")
        try:
            next(events)  # a second token: the engine goes on
        except httpx.ReadTimeout:
            return True
        return False


def test_the_hang_fault_reaches_only_the_version_it_is_set_for():
    a, b, deployment = serving_a(1, b_faults={"hang_after_first_byte": 1.0})
    services.start_rollout(deployment, to_version=b, actor=ADMIN)
    converge(deployment.pk, lambda: ready(deployment, b) == {R.WARM: 1})
    verdicts = {version.version: [hangs_after_first_byte(i) for i in
                                  Instance.objects.filter(model_version=version, state=S.READY)]
                for version in (a, b)}
    assert verdicts == {a.version: [False], b.version: [True]}
