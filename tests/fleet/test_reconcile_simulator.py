"""Reconcile against real `python -m simulator` engines: start, fail over, scale down, delete, adopt."""
import os
import signal

from audit.models import AuditEvent
from fleet import reconcile, services
from fleet.models import BuiltinRuntime, Deployment, Instance
from fleet.runtime import get_backend
from fleet.states import InstanceState
from fleet.transitions import FLEET
from tests.fleet.conftest import engine_pids
from tests.fleet.fleet_helpers import converge, ready_ids, states

S = InstanceState
FAST = {"prefill_ms_per_token": 0.01, "decode_ms_per_token": 1.0}


def deploy(version, replicas=2, **spec):
    return services.create_deployment(tenant=None, name="sim", model_version=version, min_replicas=replicas,
                                      max_replicas=max(replicas, 4), runtime_backend=BuiltinRuntime.SIMULATOR,
                                      simulator_params=FAST, actor=FLEET, **spec)


def test_deploy_fail_over_scale_down_and_delete(published_version):
    deployment = deploy(published_version)
    first = converge(deployment.pk, lambda: len(ready_ids(deployment.pk)) == 2 and ready_ids(deployment.pk))
    assert set(engine_pids()) == first

    victim = Instance.objects.get(pk=min(first))
    os.kill(victim.runtime_handle["pid"], signal.SIGKILL)
    converge(deployment.pk, lambda: len(ready_ids(deployment.pk)) == 2 and victim.pk not in ready_ids(deployment.pk))
    victim.refresh_from_db()
    replacement = Instance.objects.get(replaces=victim)
    assert victim.state == S.FAILED and victim.released_at and "exited" in victim.failure_reason
    assert replacement.restart_count == 1 and replacement.next_start_after >= victim.failed_at
    assert set(engine_pids()) == ready_ids(deployment.pk)  # no orphan of the killed engine

    services.scale_deployment(deployment, min_replicas=1, actor=FLEET)
    converge(deployment.pk, lambda: len(ready_ids(deployment.pk)) == 1 and len(engine_pids()) == 1)
    assert list(states(deployment.pk).values()).count(S.STOPPED) == 1

    services.delete_deployment(deployment, actor=FLEET)
    converge(deployment.pk, lambda: not Deployment.objects.filter(pk=deployment.pk).exists())
    assert engine_pids() == {}
    assert AuditEvent.objects.filter(action="fleet.deployment.remove").count() == 1


def test_a_hung_engine_fails_its_probes_and_is_replaced(published_version):
    deployment = deploy(published_version, replicas=1)
    (first,) = converge(deployment.pk, lambda: ready_ids(deployment.pk))
    pid = Instance.objects.get(pk=first).runtime_handle["pid"]
    os.kill(pid, signal.SIGSTOP)  # alive, but answers nothing
    converge(deployment.pk, lambda: Instance.objects.get(pk=first).state == S.FAILED)
    hung = Instance.objects.get(pk=first)
    assert "consecutive failed health probes" in hung.failure_reason
    converge(deployment.pk, lambda: ready_ids(deployment.pk) - {first})
    assert first not in engine_pids()


def test_reconcile_adopts_an_engine_a_crashed_worker_launched_but_never_recorded(published_version):
    deployment = Deployment.objects.create(name="adopt", model_version=published_version, min_replicas=1,
                                           max_replicas=1, runtime_backend=BuiltinRuntime.SIMULATOR,
                                           simulator_params=FAST)
    instance = Instance.objects.create(deployment=deployment)  # committed pending row…
    launched = get_backend("simulator").start(instance)  # …engine started, then the worker died
    reconcile.reconcile_deployment(deployment.pk)
    instance.refresh_from_db()
    assert instance.state == S.STARTING and instance.runtime_handle["pid"] == launched.handle["pid"]
    assert Instance.objects.filter(deployment=deployment).count() == 1
    assert engine_pids() == {instance.pk: {launched.handle["pid"]}}


def test_the_sweep_kills_engines_no_instance_accounts_for(published_version):
    deployment = Deployment.objects.create(name="orphans", model_version=published_version, min_replicas=0,
                                           max_replicas=1, runtime_backend=BuiltinRuntime.SIMULATOR)
    gone = Instance(pk=999_999, deployment=deployment)  # a row that was never committed
    stopped = Instance.objects.create(deployment=deployment, state=S.STOPPED)
    backend = get_backend("simulator")
    backend.start(gone)
    backend.start(stopped)
    assert set(engine_pids()) == {gone.pk, stopped.pk}
    assert sorted(reconcile.sweep_orphans()) == sorted([gone.pk, stopped.pk])
    assert engine_pids() == {}


def test_no_replacement_before_the_failed_engine_is_reaped(published_version):
    deployment = deploy(published_version, replicas=1)
    (first,) = converge(deployment.pk, lambda: ready_ids(deployment.pk))
    os.kill(Instance.objects.get(pk=first).runtime_handle["pid"], signal.SIGKILL)
    from fleet import health

    health.check_all()  # marks it failed; its clean-up task has not run yet
    reconcile.reconcile_deployment(deployment.pk)
    assert set(states(deployment.pk)) == {first}
    converge(deployment.pk, lambda: ready_ids(deployment.pk) - {first})
    assert Instance.objects.get(replaces_id=first).restart_count == 1


def test_engines_started_back_to_back_get_distinct_ports(published_version):
    """The kernel may offer a just-given port again until the engine binds it: starts skip live engines' ports."""
    deployment = Deployment.objects.create(name="ports", model_version=published_version, min_replicas=0,
                                           max_replicas=4, runtime_backend=BuiltinRuntime.SIMULATOR)
    backend = get_backend("simulator")
    instances = [Instance.objects.create(deployment=deployment) for _ in range(4)]
    try:
        ports = [backend.start(instance).port for instance in instances]
        assert len(set(ports)) == 4
        from fleet.runtime import processes

        assert set(ports) <= processes.engine_ports()
    finally:
        for instance in instances:
            backend.stop(instance, grace=2)
    assert engine_pids() == {}
