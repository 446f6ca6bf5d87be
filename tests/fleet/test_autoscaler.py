"""The autoscale pass: samples stored, the policy applied, decisions stored and audited, the wake."""
from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from fleet import services
from fleet.autoscaling import scaler
from fleet.models import DemandSample, Deployment, Instance, InstanceRole, ScalingDecision
from fleet.states import InstanceState
from fleet.transitions import FLEET
from tests.fleet.conftest import make_version

S = InstanceState


@pytest.fixture
def scaled(db):
    deployment = Deployment.objects.create(name="auto", model_version=make_version(), min_replicas=1, max_replicas=4,
                                           serving_replicas=1, runtime_backend="simulator")
    services.set_scaling_policy(deployment, actor=FLEET, up_window_seconds=20, cooldown_up_seconds=60)
    Instance.objects.create(deployment=deployment, state=S.READY, role=InstanceRole.SERVING,
                            endpoint_url="http://127.0.0.1:9", metrics={"num_requests_waiting": 30,
                                                                       "num_requests_running": 4,
                                                                       "kv_cache_usage_perc": 0.5})
    return Deployment.objects.select_related("scaling").get(pk=deployment.pk)


def backfill(deployment, seconds: int, **figures):
    now = timezone.now()
    for age in range(seconds, 0, -5):
        DemandSample.objects.create(deployment=deployment, at=now - timedelta(seconds=age), serving=1, **figures)


def test_a_queue_held_for_the_window_scales_up_and_the_decision_is_stored_and_audited(scaled):
    backfill(scaled, 25, waiting=30, running=4)
    assert scaler.run_pass() == {"sampled": 1, "changed": 1}
    scaled.refresh_from_db()
    assert scaled.serving_replicas == 3  # 30 waiting / 8 per instance asks for 4; at most 2 more at once
    decision = ScalingDecision.objects.get(deployment=scaled)
    assert (decision.rule, decision.from_serving, decision.to_serving) == ("queue", 1, 3)
    assert decision.signals["waiting"] == 30
    event = AuditEvent.objects.get(action="fleet.deployment.autoscale.up")
    assert event.after["rule"] == "queue" and event.after["serving_replicas"] == 3
    assert scaler.run_pass() == {"sampled": 1, "changed": 0}  # the cooldown holds it


def test_a_scale_up_promotes_a_ready_warm_instance_in_the_same_pass(scaled):
    """A promotion is a routing change only: it does not wait for the reconcile task (never run here)."""
    Deployment.objects.filter(pk=scaled.pk).update(warm_pool_size=1)
    warm = Instance.objects.create(deployment=scaled, state=S.READY, role=InstanceRole.WARM,
                                   endpoint_url="http://127.0.0.1:10")
    backfill(scaled, 25, waiting=30, running=4)
    assert scaler.run_pass()["changed"] == 1
    assert Instance.objects.get(pk=warm.pk).role == InstanceRole.SERVING
    assert AuditEvent.objects.filter(action="fleet.instance.promote", target_id=str(warm.pk)).exists()
    # 1 → 3: the warm one serves, one more serving and a warm refill wait for the reconcile task to launch them
    assert Instance.objects.filter(deployment=scaled, state=S.PENDING).count() == 2


def test_a_short_burst_under_the_surge_level_moves_nothing(scaled):
    Instance.objects.filter(deployment=scaled).update(metrics={"num_requests_waiting": 12})
    backfill(scaled, 10, waiting=12)  # 1.5 × the threshold of 8: the 20-s window must hold
    assert scaler.run_pass()["changed"] == 0


def test_a_short_burst_at_the_surge_level_scales_up_at_once(scaled):
    backfill(scaled, 10, waiting=30)  # and the engine's probe says 30 waiting now: 3.75 × the threshold
    assert scaler.run_pass()["changed"] == 1
    decision = ScalingDecision.objects.get(deployment=scaled)
    assert (decision.rule, decision.from_serving, decision.to_serving) == ("surge", 1, 3)


def test_a_deployment_without_a_policy_is_sampled_for_the_chart_but_never_scaled(db):
    deployment = Deployment.objects.create(name="fixed", model_version=make_version(), min_replicas=1,
                                           max_replicas=4, runtime_backend="simulator")
    assert scaler.run_pass() == {"sampled": 1, "changed": 0}
    assert DemandSample.objects.filter(deployment=deployment).count() == 1


def test_a_second_pass_at_once_is_skipped(scaled):
    from fleet import leases

    with leases.held("fleet.autoscale", ttl=30):
        assert scaler.run_pass() == {"skipped": 1}


def test_a_request_wakes_a_deployment_asleep_at_zero(db):
    from fleet.tasks import wake

    deployment = Deployment.objects.create(name="sleepy", model_version=make_version(), min_replicas=0,
                                           max_replicas=2, serving_replicas=0, runtime_backend="simulator")
    services.set_scaling_policy(deployment, actor=FLEET)
    assert Deployment.objects.get(pk=deployment.pk).serving_target == 0
    assert wake.run(deployment.pk) == {"deployment": deployment.pk, "changed": 1}
    deployment.refresh_from_db()
    assert deployment.serving_replicas == 1 and deployment.scaling.wake_requested_at is None
    assert ScalingDecision.objects.get(deployment=deployment).rule == "wake"
    assert wake.run(deployment.pk) == {"deployment": deployment.pk, "asleep": False}


def test_scaling_bounds_follow_min_and_max_changes(scaled):
    Deployment.objects.filter(pk=scaled.pk).update(serving_replicas=4)
    services.scale_deployment(Deployment.objects.get(pk=scaled.pk), actor=FLEET, max_replicas=2)
    assert Deployment.objects.get(pk=scaled.pk).serving_replicas == 2


@pytest.fixture
def deployment_of_a(tenant_a):
    return Deployment.objects.create(tenant=tenant_a, name="a-auto", model_version=make_version(), min_replicas=1,
                                     max_replicas=3, runtime_backend="simulator")


def test_the_scaling_api_reads_sets_and_refuses_bad_values_and_other_tenants(deployment_of_a, alice, bob, api):
    from tests.conftest import bearer

    url = f"/api/v1/deployments/{deployment_of_a.pk}/scaling/"
    owner = bearer(alice.key)
    assert owner.get(url).json()["enabled"] is False
    answer = owner.put(url, {"enabled": True, "queue_per_instance": 4, "ttft_p95_slo_ms": 300}, format="json")
    assert answer.status_code == 200 and answer.json()["queue_per_instance"] == 4
    assert AuditEvent.objects.filter(action="fleet.deployment.scaling_policy").exists()
    bad = owner.put(url, {"kv_cache_usage": 7, "max_step": 0}, format="json")
    assert bad.status_code == 400 and set(bad.json()) == {"kv_cache_usage", "max_step"}
    assert owner.get(url + "decisions/").json() == [] and owner.get(url + "samples/").status_code == 200
    stranger = bearer(bob.key)
    for path in (url, url + "decisions/", url + "samples/"):
        assert stranger.get(path).status_code == 404
    assert stranger.put(url, {"enabled": False}, format="json").status_code == 404
