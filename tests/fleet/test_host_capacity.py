"""A deployment asking for more than the host holds starts only what fits; the rest wait, saying why.

The arithmetic is checked on explicit hosts; the behaviour on real simulator processes, limited by
CPU cores (the one resource nobody else's engines on this shared machine claim), and admission
under concurrency with two workers racing for the last slot.
"""
import json
import threading

import pytest
from django.db import connection

from fleet import services
from fleet.models import BuiltinRuntime, Instance
from fleet.runtime import capacity, get_backend
from fleet.runtime.base import NoCapacity
from fleet.runtime.capacity import GIB, MIB, EngineUse, Host, Need
from fleet.runtime.local import LocalBackend
from fleet.states import InstanceState
from fleet.transitions import FLEET
from tests.fleet.conftest import engine_pids
from tests.fleet.fleet_helpers import converge, ready_ids

S = InstanceState


def host(*, total_gib=24, available_gib=22, cpus=2, gpus=0, engines=()) -> Host:
    return Host(memory_total=total_gib * GIB, memory_available=available_gib * GIB, cpus_total=cpus, gpus_total=gpus,
                engines=tuple(engines))


def engine(admitted_gib: float, resident_gib: float, cpus: float = 1) -> EngineUse:
    return EngineUse(admitted=Need(int(admitted_gib * GIB), cpus), resident_bytes=int(resident_gib * GIB))


@pytest.fixture
def no_reserve(settings):
    settings.SWITCHYARD_HOST_RESERVED_MEMORY_MB = 0
    settings.SWITCHYARD_HOST_RESERVED_CPUS = 0
    return settings


def test_memory_held_by_running_engines_is_not_free(no_reserve):
    full = host(total_gib=10, available_gib=9, cpus=8, engines=[engine(3, 3), engine(3, 3.5)])
    assert capacity.shortfall(Need(3 * GIB), full) is None
    assert capacity.shortfall(Need(4 * GIB), full) == "waiting for host capacity: needs 4.0 GiB memory, 3.5 GiB free"


def test_an_engine_still_loading_counts_with_the_memory_it_is_about_to_take(no_reserve):
    """The kernel still reports its memory as available; admitting on that alone is how hosts get overcommitted."""
    loading = host(total_gib=64, available_gib=8, cpus=8, engines=[engine(3, 0.2)])
    assert capacity.shortfall(Need(3 * GIB), loading) is None  # 8 − 2.8 still to come = 5.2 free
    assert "needs 6.0 GiB memory, 5.2 GiB free" in capacity.shortfall(Need(6 * GIB), loading)


def test_the_reserve_for_the_os_and_switchyard_is_never_handed_out(settings):
    settings.SWITCHYARD_HOST_RESERVED_MEMORY_MB = 2048
    settings.SWITCHYARD_HOST_RESERVED_CPUS = 1
    bare = host(total_gib=4, available_gib=4, cpus=2)
    assert capacity.shortfall(Need(2 * GIB, cpus=1), bare) is None
    assert "needs 2.5 GiB memory, 2.0 GiB free" in capacity.shortfall(Need(int(2.5 * GIB)), bare)
    assert "needs 2 CPU cores, 1 of 2 free" in capacity.shortfall(Need(GIB, cpus=2), bare)


def test_cpu_cores_and_gpus_are_admitted_as_whole_claims(no_reserve):
    busy = host(cpus=2, gpus=1, engines=[engine(1, 1, cpus=2)])
    assert capacity.shortfall(Need(GIB, cpus=1), busy) == "waiting for host capacity: needs 1 CPU core, 0 of 2 free"
    assert capacity.shortfall(Need(GIB, cpus=0, gpus=2), busy) == "waiting for host capacity: needs 2 GPUs, 1 free"


def test_a_local_engine_needs_its_runtime_kv_cache_and_weights_as_served(settings, tmp_path, published_version):
    settings.SWITCHYARD_MODEL_ROOT = tmp_path
    settings.SWITCHYARD_ENGINE_BASE_MEMORY_MB = 2048
    settings.SWITCHYARD_ENGINE_CPU_KVCACHE_GIB = 1
    settings.SWITCHYARD_ENGINE_CPUS = 1
    model_dir = tmp_path / "coder"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16"}))
    (model_dir / "model.safetensors").write_bytes(b"\0" * (3 * MIB))
    (model_dir / "tokenizer.json").write_bytes(b"{}" * 1000)  # not weights
    published_version.artifact_uri = str(model_dir)
    published_version.dtype = "float32"  # the CPU engine widens bf16 weights to 4 bytes
    deployment = services.create_deployment(tenant=None, name="local", model_version=published_version, actor=FLEET,
                                            runtime_backend=BuiltinRuntime.LOCAL, min_replicas=0)
    need = LocalBackend().estimate(Instance(deployment=deployment))
    assert need == Need(memory_bytes=2048 * MIB + GIB + 6 * MIB, cpus=1, gpus=0)


@pytest.fixture
def two_cores_free(settings, no_reserve):
    """Simulators that claim a core each, on a host with two cores beyond what engines hold already."""
    held = sum(e.admitted.cpus for e in capacity.engine_uses())
    settings.SWITCHYARD_HOST_CPUS = int(held) + 2
    settings.SWITCHYARD_SIMULATOR_CPUS = 1
    return settings


def test_a_deployment_bigger_than_the_host_starts_what_fits_and_the_rest_wait_with_the_reason(
        two_cores_free, published_version, charlie, client):
    deployment = services.create_deployment(tenant=None, name="big", model_version=published_version, actor=FLEET,
                                            runtime_backend=BuiltinRuntime.SIMULATOR, min_replicas=4, max_replicas=4,
                                            simulator_params={"decode_ms_per_token": 1.0})
    most = []

    def two_ready_two_waiting():
        most.append(len(engine_pids()))
        live = Instance.objects.filter(deployment=deployment).exclude(state__in=[S.STOPPED, S.FAILED])
        waiting = [i for i in live if i.state == S.PENDING and i.pending_reason]
        return len(ready_ids(deployment.pk)) == 2 and len(waiting) == 2 and waiting

    waiting = converge(deployment.pk, two_ready_two_waiting)
    assert max(most) == 2 and Instance.objects.filter(deployment=deployment).count() == 4
    reason = waiting[0].pending_reason
    assert reason.startswith("waiting for host capacity: needs 1 CPU core, 0 of ")

    client.force_login(charlie.user)
    body = client.get(f"/api/v1/deployments/{deployment.pk}/").json()
    assert sorted(i["pending_reason"] for i in body["instances"]) == ["", "", reason, reason]
    page = client.get(f"/console/fleet/{deployment.pk}/").content.decode()
    assert reason in page
    listing = client.get("/console/fleet/").content.decode()
    assert "2 waiting for host capacity" in listing

    two_cores_free.SWITCHYARD_HOST_CPUS += 2  # room appears: the waiting instances start
    converge(deployment.pk, lambda: len(ready_ids(deployment.pk)) == 4)
    assert not Instance.objects.filter(deployment=deployment).exclude(pending_reason="").exists()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="two workers at once need a server database")
@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_for_the_last_core_start_one_engine(settings, published_version):
    settings.SWITCHYARD_HOST_RESERVED_CPUS = 0
    settings.SWITCHYARD_HOST_CPUS = int(sum(e.admitted.cpus for e in capacity.engine_uses())) + 1
    settings.SWITCHYARD_SIMULATOR_CPUS = 1
    deployment = services.create_deployment(tenant=None, name="race", model_version=published_version, actor=FLEET,
                                            runtime_backend=BuiltinRuntime.SIMULATOR, min_replicas=0, max_replicas=2)
    instances = [Instance.objects.create(deployment=deployment) for _ in range(2)]
    barrier, outcomes = threading.Barrier(2), []

    def start(instance):
        try:
            barrier.wait()
            get_backend("simulator").start(Instance.objects.select_related("deployment__model_version__model")
                                           .get(pk=instance.pk))
            outcomes.append("started")
        except NoCapacity as exc:
            outcomes.append(str(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=start, args=(i,)) for i in instances]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    refused = [o for o in outcomes if o != "started"]
    assert outcomes.count("started") == 1 and len(refused) == 1 and refused[0].startswith("waiting for host capacity")
    assert len(engine_pids()) == 1
