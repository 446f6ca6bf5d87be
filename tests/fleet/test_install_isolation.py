"""Another install's engine on this host — same namespace, same instance id, other token — is never ours.

Instance ids restart at 1 in every database, so id collisions between installs are the normal case.
Each test plays "the other install" by launching an engine tagged with our namespace and our
instance's id but another install's token, and checks that adoption, the orphan sweep, the stop
command and the health check all leave it alone.
"""
import os
import sys

import pytest
from django.core.management import call_command

from fleet import health, reconcile
from fleet.install import current_install, engine_owner, namespace_for
from fleet.models import BuiltinRuntime, Deployment, Install, Instance
from fleet.runtime import get_backend, processes
from fleet.states import InstanceState
from tests.fleet.conftest import NAMESPACE
from tests.processes import start_simulator, stop, wait_http

S = InstanceState
pytestmark = pytest.mark.django_db


def other_install() -> processes.EngineOwner:
    return processes.EngineOwner(NAMESPACE, "token-of-another-install")


def launch_foreign(instance_id: int, *, argv=None) -> dict:
    """A simulator of 'the other install' tagged with `instance_id` (our namespace, their token)."""
    port = processes.free_port()
    argv = argv or [sys.executable, "-m", "simulator", "--host", "127.0.0.1", "--port", str(port),
                    "--served-model-name", "tiny-coder"]
    foreign = processes.spawn(argv, owner=other_install(), backend="simulator", instance_id=instance_id, port=port,
                              env={}, cwd=".")
    # Serving before the code under test runs, so that "still alive afterwards" says what that code did.
    wait_http(f"http://127.0.0.1:{port}/health", timeout=30, output=lambda: _how_it_ended(foreign))
    return foreign


def _how_it_ended(foreign: dict) -> str:
    pid, status = os.waitpid(foreign["pid"], os.WNOHANG)  # our child: reaped here if it has exited
    ended = "still running" if pid == 0 else (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                                              else f"exited with {os.WEXITSTATUS(status)}")
    return f"the other install's simulator {ended}; its log:\n{processes.read_tail(foreign['log'], 40)}"


def alive_pids(owner) -> set[int]:
    return {p["pid"] for procs in processes.tagged_processes(owner).values() for p in procs}


@pytest.fixture
def deployment(published_version):
    return Deployment.objects.create(name="mine", model_version=published_version, min_replicas=1, max_replicas=1,
                                     runtime_backend=BuiltinRuntime.SIMULATOR)


def test_a_foreign_engine_with_our_instance_id_is_not_adopted(deployment):
    instance = Instance.objects.create(deployment=deployment)
    foreign = launch_foreign(instance.pk)
    reconcile.reconcile_deployment(deployment.pk)
    instance.refresh_from_db()
    assert instance.state == S.STARTING and instance.runtime_handle["pid"] != foreign["pid"]
    assert foreign["pid"] in alive_pids(other_install())


def test_the_orphan_sweep_and_the_stop_command_leave_foreign_engines_running(deployment):
    ours = Instance.objects.create(deployment=deployment, state=S.STOPPED)  # an orphan of our own…
    get_backend("simulator").start(ours)
    foreign = launch_foreign(ours.pk)  # …and the other install's engine with the same id
    assert reconcile.sweep_orphans() == [ours.pk]
    assert foreign["pid"] in alive_pids(other_install())
    mine = Instance.objects.create(deployment=deployment)
    get_backend("simulator").start(mine)
    call_command("fleet_stop_engines")
    assert processes.tagged_processes(engine_owner()) == {}
    assert foreign["pid"] in alive_pids(other_install())


def test_stopping_an_instance_never_signals_the_other_installs_engine(deployment):
    instance = Instance.objects.create(deployment=deployment)
    foreign = launch_foreign(instance.pk)
    assert get_backend("simulator").stop(instance, 1.0) is True  # nothing of ours to stop
    assert foreign["pid"] in alive_pids(other_install())


def test_an_engine_whose_port_another_process_answers_on_never_becomes_ready(deployment):
    """Our engine lost the race for its port; the stranger there answers /health, but is not us."""
    stranger, url = start_simulator("tiny-coder")
    try:
        port = int(url.rsplit(":", 1)[1])
        instance = Instance.objects.create(deployment=deployment)
        sleeper = processes.spawn([sys.executable, "-c", "import time; time.sleep(60)"], owner=engine_owner(),
                                  backend="simulator", instance_id=instance.pk, port=port, env={}, cwd=".")
        Instance.objects.filter(pk=instance.pk).update(state=S.STARTING, port=port, endpoint_url=url,
                                                       runtime_handle=sleeper)
        with health.new_client() as client:
            outcome = health.check_instance(Instance.objects.get(pk=instance.pk), client)
        instance.refresh_from_db()
        assert outcome == "port-taken" and instance.state == S.FAILED
        assert f"port {port} answers, but not from this instance's engine" in instance.failure_reason
    finally:
        stop(stranger)


def test_engine_logs_of_two_installs_never_share_a_file():
    assert processes.log_path("sy-aaaa", 1) != processes.log_path("sy-bbbb", 1)
    assert processes.log_path("sy-aaaa", 1).parent.name == "sy-aaaa"


def test_without_configuration_the_namespace_is_derived_from_this_databases_install_id(settings):
    settings.SWITCHYARD_FLEET_NAMESPACE = ""
    install = current_install()
    assert engine_owner() == processes.EngineOwner(f"sy-{install.install_id}", install.engine_token)
    Install.objects.all().delete()  # a new database is a new install
    again = current_install()
    assert again.install_id != install.install_id and again.engine_token != install.engine_token
    assert namespace_for(again) != namespace_for(install)
