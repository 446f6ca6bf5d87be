"""Instances carry their model version: the per-version targets of a rollout (pure), reconcile keeping them, and
engines started from their own version."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet import reconcile, versions
from fleet.models import Deployment, Instance, InstanceRole
from fleet.runtime.simulator import SimulatorBackend
from fleet.states import InstanceState
from fleet.validation import simulator_params_problem
from fleet.versions import VersionPlan, VersionTarget, plan_versions
from tests.fleet.conftest import make_version

S, R = InstanceState, InstanceRole
A, B = 1, 2


def test_without_a_rollout_the_deployments_version_keeps_every_instance():
    assert plan_versions(A, 3, 1, VersionPlan()) == {A: VersionTarget(3, 1)}


def test_a_canary_at_ten_percent_serves_one_b_and_keeps_both_versions_at_full_size():
    targets = plan_versions(A, 4, 1, VersionPlan(weights={A: 0.9, B: 0.1}))
    assert targets == {A: VersionTarget(4, 1), B: VersionTarget(1, 3)}


def test_before_traffic_moves_b_is_all_warm():
    assert plan_versions(A, 2, 0, VersionPlan(weights={A: 1.0, B: 0.0}))[B] == VersionTarget(0, 2)


def test_after_promotion_the_old_version_stays_warm_for_its_grace_period_unless_asleep():
    assert plan_versions(B, 2, 0, VersionPlan(keep_warm={A: 2})) == {B: VersionTarget(2, 0), A: VersionTarget(0, 2)}
    assert plan_versions(B, 0, 0, VersionPlan(keep_warm={A: 2})) == {B: VersionTarget(0, 0)}


@given(serving=st.integers(0, 64), warm=st.integers(0, 8), weight=st.floats(0, 1))
def test_every_version_with_traffic_serves_and_none_drops_below_a_full_set(serving, warm, weight):
    targets = plan_versions(A, serving, warm, VersionPlan(weights={A: 1 - weight, B: weight}))
    for version, w in ((A, 1 - weight), (B, weight)):
        target = targets[version]
        assert target.serving + target.warm >= serving
        assert (target.serving > 0) == (w > 0 and serving > 0)
        assert target.serving <= serving


@pytest.mark.django_db
def test_reconcile_stamps_new_instances_and_splits_them_per_version(monkeypatch):
    old, new = make_version(), make_version(artifact_uri="fleet-tiny-coder-b")
    deployment = Deployment.objects.create(name="v", model_version=old, min_replicas=2, max_replicas=2,
                                           runtime_backend="simulator")
    reconcile._plan(deployment.pk)
    assert set(Instance.objects.values_list("model_version_id", "role")) == {(old.pk, R.SERVING)}
    monkeypatch.setattr(versions, "version_plan", lambda d: VersionPlan(weights={old.pk: 0.5, new.pk: 0.5}))
    assert reconcile._plan(deployment.pk)["created"] == 2
    rows = sorted(Instance.objects.filter(state=S.PENDING).values_list("model_version_id", "role"))
    assert rows == sorted([(old.pk, R.SERVING), (old.pk, R.WARM), (new.pk, R.SERVING), (new.pk, R.WARM)])


@pytest.mark.django_db
def test_instances_of_a_version_no_longer_wanted_are_drained():
    old, new = make_version(), make_version(artifact_uri="fleet-tiny-coder-b")
    deployment = Deployment.objects.create(name="v", model_version=new, min_replicas=1, max_replicas=1,
                                           runtime_backend="simulator")
    stale = Instance.objects.create(deployment=deployment, model_version=old, state=S.PENDING)
    reconcile._plan(deployment.pk)
    stale.refresh_from_db()
    assert stale.state in (S.DRAINING, S.STOPPED)
    assert Instance.objects.filter(model_version=new, state=S.PENDING).count() == 1


@pytest.mark.django_db
def test_a_simulator_engine_starts_from_its_own_version_and_that_versions_fault_flags():
    old, new = make_version(), make_version(artifact_uri="fleet-tiny-coder-b")
    deployment = Deployment.objects.create(
        name="v", model_version=old, runtime_backend="simulator",
        simulator_params={"max_num_seqs": 4,
                          "versions": {new.version: {"error_rate": 0.2, "hang_after_first_byte": 0.5}}})
    plain = SimulatorBackend().argv(Instance(deployment=deployment), 9000)
    faulty = SimulatorBackend().argv(Instance(deployment=deployment, model_version=new), 9000)
    assert "--error-rate" not in plain and "--hang-after-first-byte" not in plain and "--max-num-seqs" in plain
    assert faulty[faulty.index("--error-rate") + 1] == "0.2" and "--max-num-seqs" in faulty
    assert faulty[faulty.index("--hang-after-first-byte") + 1] == "0.5"


@pytest.mark.parametrize("params, problem", [
    ({"versions": {"v2": {"error_rate": 0.5}}}, None),
    ({"versions": {"v2": {"error_rate": 2.0}}}, "versions['v2']: error_rate must be within [0, 1]"),
    ({"versions": {"v2": {"hang_after_first_byte": 1.5}}},
     "versions['v2']: hang_after_first_byte must be within [0, 1]"),
    ({"versions": {"v2": {"hang_after_first_byte": "half"}}}, "versions['v2']: hang_after_first_byte must be a float."),
    ({"versions": {"v2": {"port": 1}}}, "versions['v2']: Unknown or reserved simulator parameter 'port'."),
    ({"versions": ["v2"]}, "versions must map version labels to simulator parameters."),
])
def test_per_version_simulator_parameters_are_checked(params, problem):
    assert simulator_params_problem(params) == problem


@pytest.mark.django_db
def test_an_engines_gpu_time_is_costed_to_the_version_it_runs():
    from datetime import timedelta

    from django.utils import timezone

    from usage.cost.hourly import range_shares
    from usage.periods import HOUR, floor_hour

    hour = floor_hour(timezone.now()) - HOUR
    old, new = make_version(), make_version(artifact_uri="fleet-tiny-coder-b")
    deployment = Deployment.objects.create(name="c", model_version=old, min_replicas=2, max_replicas=2,
                                           runtime_backend="simulator", gpu_type="l4")
    for version in (old, new):
        Instance.objects.create(deployment=deployment, model_version=version, state=S.READY, starting_at=hour,
                                ready_at=hour, stopped_at=hour + timedelta(minutes=30))
    shares = range_shares(hour, hour + HOUR, timezone.now())[hour]
    assert {share.model_version_id for share in shares} == {old.pk, new.pk}
