"""Serving and warm instances: the plan that promotes, demotes, drains and creates (pure), and reconcile doing it."""
import pytest

from fleet import reconcile
from fleet.models import Deployment, Instance, InstanceRole, ScalingPolicy
from fleet.roles import Live, plan_roles
from fleet.states import InstanceState
from tests.fleet.conftest import make_version

S, R = InstanceState, InstanceRole


def test_growing_promotes_the_readiest_warm_instance_and_refills_the_pool():
    live = [Live(1, S.READY, R.SERVING), Live(2, S.STARTING, R.WARM), Live(3, S.READY, R.WARM)]
    plan = plan_roles(live, serving_target=2, warm_target=2)
    assert (plan.promote, plan.demote, plan.drain) == ([3], [], [])
    assert (plan.create_serving, plan.create_warm) == (0, 1)


def test_shrinking_keeps_a_ready_instance_warm_when_the_pool_has_room_and_drains_the_rest():
    live = [Live(1, S.READY, R.SERVING), Live(2, S.READY, R.SERVING), Live(3, S.PENDING, R.SERVING)]
    plan = plan_roles(live, serving_target=1, warm_target=1)
    assert plan.demote == [2] and plan.drain == [3] and plan.promote == []
    assert (plan.create_serving, plan.create_warm) == (0, 0)


def test_held_slots_delay_new_instances_serving_first():
    plan = plan_roles([], serving_target=2, warm_target=1, slots_held=2)
    assert (plan.create_serving, plan.create_warm) == (0, 1)


@pytest.mark.django_db
def test_reconcile_promotes_a_warm_instance_without_starting_a_new_serving_one(settings):
    settings.SWITCHYARD_SIMULATOR_MEMORY_MB = 1
    deployment = Deployment.objects.create(name="w", model_version=make_version(), min_replicas=1, max_replicas=3,
                                           warm_pool_size=1, runtime_backend="simulator")
    ScalingPolicy.objects.create(deployment=deployment)
    reconcile._plan(deployment.pk)
    roles = sorted(Instance.objects.filter(deployment=deployment).values_list("pk", "role"))
    assert [role for _, role in roles] == [R.SERVING, R.WARM]
    warm_pk = roles[1][0]
    Instance.objects.filter(pk=warm_pk).update(state=S.READY, endpoint_url="http://127.0.0.1:9")
    Deployment.objects.filter(pk=deployment.pk).update(serving_replicas=2)  # the autoscaler grew it
    result = reconcile._plan(deployment.pk)
    assert result == {"created": 1, "drained": 0, "promoted": 1, "demoted": 0}
    assert Instance.objects.get(pk=warm_pk).role == R.SERVING
    assert Instance.objects.filter(deployment=deployment, role=R.WARM, state=S.PENDING).count() == 1
    from audit.models import AuditEvent

    assert AuditEvent.objects.filter(action="fleet.instance.promote", target_id=str(warm_pk)).exists()


@pytest.mark.django_db
def test_a_warm_instances_time_is_costed_as_warm_idle_capacity():
    from datetime import timedelta

    from django.utils import timezone

    from fleet.models import WarmSpan
    from usage.cost.hourly import range_shares
    from usage.periods import HOUR, floor_hour

    hour = floor_hour(timezone.now()) - HOUR
    deployment = Deployment.objects.create(name="c", model_version=make_version(), min_replicas=1, max_replicas=2,
                                           runtime_backend="simulator", gpu_type="l4")
    instance = Instance.objects.create(deployment=deployment, state=S.READY, role=R.WARM, starting_at=hour,
                                       ready_at=hour)
    WarmSpan.objects.create(instance=instance, started_at=hour, ended_at=hour + timedelta(minutes=30))
    shares = range_shares(hour, hour + HOUR, timezone.now())[hour]
    seconds = {share.kind: float(share.gpu_seconds) for share in shares}
    assert seconds == {"warm": 1800.0, "idle": 1800.0}
