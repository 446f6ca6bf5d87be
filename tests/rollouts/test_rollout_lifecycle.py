"""A rollout from start to promotion or rollback: what it refuses, the engines each state asks for, and the gates
judging figures read from real usage records — every transition audited with the figures behind it."""
import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from audit.models import AuditEvent
from fleet import reconcile
from fleet.models import Deployment, Instance, InstanceRole
from fleet.states import InstanceState
from rollouts import services, stepping
from rollouts.models import Rollout, RolloutState
from tests.fleet.conftest import make_version
from tests.rollouts.conftest import ADMIN, mark_ready, serve

R, S = RolloutState, InstanceState
FAST = [{"weight": 0.1, "bake_seconds": 0}, {"weight": 0.5, "bake_seconds": 0}, {"weight": 1.0, "bake_seconds": 0}]
GATES = {"min_requests": 20}


def start(world, **options) -> Rollout:
    options = {"stages": FAST, "gates": GATES, **options}
    return services.start_rollout(world.deployment, to_version=world.b, actor=ADMIN, **options)


def warm_up(world) -> None:
    """Reconcile creates B's engines; they come up."""
    reconcile._plan(world.deployment.pk)
    mark_ready(Instance.objects.filter(deployment=world.deployment))


def roles(world, version) -> list[str]:
    return sorted(Instance.objects.filter(deployment=world.deployment, model_version=version,
                                          state__in=(S.READY, S.PENDING)).values_list("role", flat=True))


def refresh(rollout) -> Rollout:
    return Rollout.objects.get(pk=rollout.pk)


@pytest.mark.django_db
def test_b_comes_up_warm_at_full_size_before_any_traffic_moves(world):
    rollout = start(world)
    reconcile._plan(world.deployment.pk)
    assert roles(world, world.b) == [InstanceRole.WARM, InstanceRole.WARM]
    assert stepping.step(rollout.pk) == "waiting"
    warm_up(world)
    assert stepping.step(rollout.pk) == "ramping"
    rollout = refresh(rollout)
    assert (rollout.state, rollout.weight) == (R.RAMPING, 0.1)
    reconcile._plan(world.deployment.pk)
    assert roles(world, world.b) == [InstanceRole.SERVING, InstanceRole.WARM]
    assert roles(world, world.a) == [InstanceRole.SERVING, InstanceRole.SERVING]


@pytest.mark.django_db
def test_a_healthy_canary_advances_through_every_stage_and_is_promoted_with_a_kept_warm(world):
    rollout = start(world)
    warm_up(world)
    stepping.step(rollout.pk)
    for expected in ("advanced", "advanced", "promoted"):
        serve(world.deployment, world.b, ok=30)
        serve(world.deployment, world.a, ok=30)
        assert stepping.step(rollout.pk) == expected
    deployment = Deployment.objects.get(pk=world.deployment.pk)
    assert deployment.model_version_id == world.b.pk
    reconcile._plan(deployment.pk)
    assert roles(world, world.b) == [InstanceRole.SERVING, InstanceRole.SERVING]
    assert roles(world, world.a) == [InstanceRole.WARM, InstanceRole.WARM]  # the grace period
    actions = list(AuditEvent.objects.filter(action__startswith="rollout.").order_by("seq")
                   .values_list("action", flat=True))
    assert actions == ["rollout.start", "rollout.ramp", "rollout.advance", "rollout.advance", "rollout.promote"]
    promote = AuditEvent.objects.get(action="rollout.promote")
    assert promote.after["figures"]["verdict"] == "pass" and promote.after["figures"]["new"]["requests"] == 30


@pytest.mark.django_db
def test_twenty_percent_errors_roll_back_during_the_first_stage_and_b_lets_go(world):
    rollout = start(world, stages=[{"weight": 0.1, "bake_seconds": 900}, {"weight": 1.0, "bake_seconds": 900}])
    warm_up(world)
    stepping.step(rollout.pk)
    serve(world.deployment, world.a, ok=200)
    serve(world.deployment, world.b, ok=16, errors=4)
    assert stepping.step(rollout.pk) == "rolled_back"
    rollout = refresh(rollout)
    assert (rollout.state, rollout.weight) == (R.ROLLED_BACK, 0.0)
    assert "error rate 20.0%" in rollout.state_reason
    event = AuditEvent.objects.get(action="rollout.roll_back")
    assert event.after["figures"]["failed"] == ["error_rate", "error_rate_vs_old"]
    assert event.after["figures"]["new"] == {"requests": 20, "errors": 4, "ttft_p95_ms": 100.0}
    reconcile._plan(world.deployment.pk)
    assert roles(world, world.b) == []
    assert roles(world, world.a) == [InstanceRole.SERVING, InstanceRole.SERVING]
    assert Deployment.objects.get(pk=world.deployment.pk).model_version_id == world.a.pk


@pytest.mark.django_db
def test_failures_retried_on_another_engine_still_count_against_b(world):
    rollout = start(world)
    warm_up(world)
    stepping.step(rollout.pk)
    b_engine = Instance.objects.filter(model_version=world.b).first()
    serve(world.deployment, world.a, ok=40, retried_from=b_engine.pk)  # users were served by A after B failed
    serve(world.deployment, world.b, ok=10)
    assert stepping.step(rollout.pk) == "rolled_back"


@pytest.mark.django_db
def test_a_three_times_slower_b_is_rolled_back_on_the_ttft_gate(world):
    rollout = start(world)
    warm_up(world)
    stepping.step(rollout.pk)
    serve(world.deployment, world.a, ok=100, ttft_ms=100)
    serve(world.deployment, world.b, ok=30, ttft_ms=300)
    assert stepping.step(rollout.pk) == "rolled_back"
    assert refresh(rollout).last_evaluation["failed"] == ["ttft_p95_vs_old"]


@pytest.mark.django_db
def test_a_baked_stage_without_enough_requests_pauses_and_a_person_resumes_it(world):
    rollout = start(world, gates={**GATES, "data_timeout_seconds": 0})
    warm_up(world)
    stepping.step(rollout.pk)
    serve(world.deployment, world.b, ok=3)
    assert stepping.step(rollout.pk) == "paused"
    assert refresh(rollout).state_reason == "3 of 20 requests needed"
    services.resume_rollout(refresh(rollout), actor=ADMIN)
    serve(world.deployment, world.b, ok=30, ago=0)
    assert stepping.step(rollout.pk) == "advanced"


@pytest.mark.django_db
def test_a_failing_gate_still_rolls_back_while_paused(world):
    rollout = start(world)
    warm_up(world)
    stepping.step(rollout.pk)
    services.pause_rollout(refresh(rollout), actor=ADMIN)
    serve(world.deployment, world.b, ok=10, errors=10)
    assert stepping.step(rollout.pk) == "rolled_back"


@pytest.mark.django_db
def test_an_engine_of_b_failing_to_start_aborts_before_traffic_moves(world):
    rollout = start(world)
    reconcile._plan(world.deployment.pk)
    Instance.objects.filter(model_version=world.b).update(state=S.FAILED, failed_at=rollout.created_at)
    assert stepping.step(rollout.pk) == "aborted"
    assert AuditEvent.objects.filter(action="rollout.abort").exists()


@pytest.mark.django_db
def test_promote_now_and_rolling_back_a_promoted_rollout_starts_the_reverse(world):
    rollout = start(world)
    warm_up(world)
    stepping.step(rollout.pk)
    services.promote_rollout(refresh(rollout), actor=ADMIN)
    reconcile._plan(world.deployment.pk)
    reverse = services.roll_back_rollout(refresh(rollout), actor=ADMIN)
    assert (reverse.from_version_id, reverse.to_version_id, reverse.reverses_id) == (world.b.pk, world.a.pk,
                                                                                      rollout.pk)
    # A was still warm: traffic moved back in the call itself, no engine to wait for, no step needed.
    assert (reverse.state, reverse.weight) == (RolloutState.RAMPING, 1.0)
    assert roles(world, world.a) == [InstanceRole.SERVING, InstanceRole.SERVING]
    assert stepping.step(reverse.pk) == "promoted"
    assert Deployment.objects.get(pk=world.deployment.pk).model_version_id == world.a.pk


@pytest.mark.django_db
def test_the_old_version_is_retired_when_the_grace_period_is_over(world):
    rollout = start(world, grace_seconds=0)
    warm_up(world)
    stepping.step(rollout.pk)
    services.promote_rollout(refresh(rollout), actor=ADMIN)
    assert stepping.step(rollout.pk) == "retired"
    reconcile._plan(world.deployment.pk)
    assert roles(world, world.a) == []


@pytest.mark.django_db
@pytest.mark.parametrize("change, field", [
    (lambda w: {"to_version": w.a}, "to_version"),
    (lambda w: {"to_version": make_version(status="draft")}, "to_version"),
    (lambda w: {"to_version": make_version("other-model")}, "to_version"),
    (lambda w: {"stages": [{"weight": 0.5}, {"weight": 0.2}]}, "stages"),
    (lambda w: {"gates": {"ttft_p95_ratio": 0.5}}, "gates"),
    (lambda w: {"strategy": "big-bang"}, "strategy"),
])
def test_a_bad_rollout_is_refused_naming_the_field(world, change, field):
    options = {"to_version": world.b, "stages": FAST, **change(world)}
    with pytest.raises(ValidationError) as refused:
        services.start_rollout(world.deployment, actor=ADMIN, **options)
    assert field in refused.value.message_dict


@pytest.mark.django_db
def test_a_sleeping_or_deleting_deployment_cannot_be_rolled_out(world):
    Deployment.objects.filter(pk=world.deployment.pk).update(status="deleting")
    with pytest.raises(ValidationError, match="draining"):
        start(world)


@pytest.mark.django_db
def test_a_tenant_without_quota_room_for_the_second_set_of_engines_is_refused(world, settings):
    from tests.factories import make_tenant

    tenant = make_tenant("tight")
    Deployment.objects.filter(pk=world.deployment.pk).update(tenant=tenant)
    world.deployment.refresh_from_db()
    settings.SWITCHYARD_FLEET_MAX_INSTANCES_PER_TENANT = 3  # 2 of A now, 2 of B during the rollout
    with pytest.raises(ValidationError, match="runs 2 more engine"):
        start(world)
    settings.SWITCHYARD_FLEET_MAX_INSTANCES_PER_TENANT = 4
    assert start(world).state == R.PENDING


@pytest.mark.django_db
def test_at_most_one_active_rollout_per_deployment_even_past_the_service(world):
    rollout = start(world)
    with pytest.raises(ValidationError, match="already in progress"):
        start(world)
    with pytest.raises(IntegrityError), transaction.atomic():
        Rollout.objects.create(deployment=world.deployment, from_version=world.a, to_version=world.b, stages=FAST)
    assert rollout.deployment.rollout_in_progress()


@pytest.mark.django_db
def test_the_autoscaler_does_not_scale_down_during_a_rollout(world):
    from datetime import timedelta

    from django.utils import timezone

    from fleet import services as fleet_services
    from fleet.autoscaling import scaler
    from fleet.models import DemandSample

    Deployment.objects.filter(pk=world.deployment.pk).update(min_replicas=1, max_replicas=4)
    fleet_services.set_scaling_policy(world.deployment, actor=ADMIN, idle_window_seconds=20, cooldown_down_seconds=0)
    Deployment.objects.filter(pk=world.deployment.pk).update(serving_replicas=2)
    now = timezone.now()
    for age in range(25, 0, -5):  # idle for the whole window: one instance fewer, were it not for the rollout
        DemandSample.objects.create(deployment=world.deployment, at=now - timedelta(seconds=age), serving=2)
    rollout = start(world)
    assert scaler.run_pass()["changed"] == 0
    services.roll_back_rollout(rollout, actor=ADMIN)
    assert scaler.run_pass()["changed"] == 1
    assert Deployment.objects.get(pk=world.deployment.pk).serving_replicas == 1


@pytest.mark.django_db
def test_the_old_versions_warm_engines_in_the_grace_period_are_shown_as_idle_cost_until_retired(world):
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from fleet.models import WarmSpan
    from rollouts.selectors import grace_cost
    from usage.models import PriceUnit
    from usage.services import set_gpu_price

    now = timezone.now()
    set_gpu_price("cpu", Decimal("0.10"), unit=PriceUnit.CPU_CORE, effective_from=now - timedelta(days=1), actor=ADMIN)
    rollout = start(world)
    warm_up(world)
    stepping.step(rollout.pk)
    assert grace_cost(refresh(rollout)) is None  # not promoted: no grace period
    rollout = services.promote_rollout(refresh(rollout), actor=ADMIN)
    # Half an hour into the grace period (moved back in time: A's two engines went warm just before).
    Rollout.objects.filter(pk=rollout.pk).update(promoted_at=now - timedelta(seconds=1800))
    WarmSpan.objects.filter(instance__model_version=world.a).update(started_at=now - timedelta(seconds=1900))
    shown = grace_cost(refresh(rollout), now=now)
    # 2 engines × 1800 s warm × 4 CPU cores each (the default) at $0.10 per core-hour = $0.40 so far, $0.80 per hour.
    assert (shown["engines_warm"], shown["warm_seconds"], shown["idle_cost_usd"], shown["hourly_usd"]) == (
        2, 3600.0, 0.4, 0.8)
    assert shown["retire_at"] == now - timedelta(seconds=1800) + timedelta(seconds=rollout.grace_seconds)
    Rollout.objects.filter(pk=rollout.pk).update(grace_seconds=1800)
    assert stepping.step(rollout.pk) == "retired"
    reconcile._plan(world.deployment.pk)
    later = grace_cost(refresh(rollout), now=now + timedelta(hours=5))
    assert later["engines_warm"] == 0 and later["hourly_usd"] == 0 and later["idle_cost_usd"] >= 0.4
    assert later["idle_cost_usd"] < 0.41  # counted up to the retirement only, not the five hours after
