"""Real vLLM engines on the local backend: a deployment asking for more than the host holds starts
only what fits, the rest wait as `pending` saying why, and the host stays responsive.

The sizes are real: an engine's need is the local backend's own estimate for the tiny model (runtime
+ KV cache + weights as served), and the engines' resident memory is measured once they run. The
host is made small (SWITCHYARD_HOST_MEMORY_MB: what the host's engines already hold + room for
two and a half of these), so the test never starts more than two real engines.
"""
import httpx
import pytest

from audit.actor import Actor
from fleet import services
from fleet.models import BuiltinRuntime, Instance
from fleet.runtime import capacity, processes
from fleet.runtime.capacity import GIB, MIB
from fleet.runtime.local import LocalBackend
from fleet.states import InstanceState
from fleet.transitions import FLEET
from tests.fleet.conftest import engine_pids
from tests.fleet.fleet_helpers import converge, ready_ids

S = InstanceState
RESERVE_MB = 1024
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def tiny_coder(settings, tiny_model_dir):
    from models_registry.services import ensure_tiny_coder

    settings.SWITCHYARD_MODEL_ROOT = tiny_model_dir.parent
    return ensure_tiny_coder(model_dir=tiny_model_dir, actor=Actor.system("capacity-test"))


@pytest.fixture
def host_for_two(settings, tiny_coder):
    """A host with room for two engines of this model beside whatever engines already run on it."""
    settings.SWITCHYARD_FLEET_START_DEADLINE_SECONDS = 900  # two real engines share two busy cores
    settings.SWITCHYARD_FLEET_PROBE_TIMEOUT_SECONDS = 5.0
    settings.SWITCHYARD_FLEET_HEALTH_FAILURES = 5
    settings.SWITCHYARD_HOST_RESERVED_MEMORY_MB = RESERVE_MB
    deployment = services.create_deployment(tenant=None, name="too-big", model_version=tiny_coder, actor=FLEET,
                                            runtime_backend=BuiltinRuntime.LOCAL, min_replicas=0, max_replicas=4)
    need = LocalBackend().need(Instance(deployment=deployment))
    host = capacity.observe()
    held = sum(e.holds_bytes for e in host.engines)
    to_allocate = sum(e.still_to_allocate for e in host.engines)
    if host.memory_available - RESERVE_MB * MIB - to_allocate < 2 * need.memory_bytes:
        pytest.skip("this host has not the memory for two real engines right now")
    settings.SWITCHYARD_HOST_MEMORY_MB = (RESERVE_MB * MIB + held + int(2.5 * need.memory_bytes)) // MIB
    settings.SWITCHYARD_HOST_CPUS = int(sum(e.admitted.cpus for e in host.engines)) + 8  # memory is the limit here
    return deployment, need


def test_only_what_fits_starts_and_the_rest_wait_with_the_reason(host_for_two, charlie, client):
    deployment, need = host_for_two
    assert need.memory_bytes > 3 * GIB  # runtime + KV cache + weights: a real engine's size, not a token
    services.scale_deployment(deployment, min_replicas=4, max_replicas=4, actor=FLEET)
    most_engines, least_free = [], []

    def two_ready_two_waiting():
        most_engines.append(len(engine_pids()))
        least_free.append(capacity._meminfo()["MemAvailable"])
        waiting = list(Instance.objects.filter(deployment=deployment, state=S.PENDING).exclude(pending_reason=""))
        return len(ready_ids(deployment.pk)) == 2 and len(waiting) == 2 and waiting

    waiting = converge(deployment.pk, two_ready_two_waiting, timeout=1200)
    assert max(most_engines) == 2
    assert min(least_free) > RESERVE_MB * MIB  # the host kept its reserve the whole time
    assert "waiting for host capacity: needs" in waiting[0].pending_reason and "GiB memory" in waiting[0].pending_reason

    client.force_login(charlie.user)
    body = client.get(f"/api/v1/deployments/{deployment.pk}/").json()
    assert sorted(bool(i["pending_reason"]) for i in body["instances"]) == [False, False, True, True]
    for instance in Instance.objects.filter(deployment=deployment, state=S.READY):
        completion = httpx.post(instance.endpoint_url + "/v1/completions", timeout=120,
                                json={"model": "tiny-coder", "prompt": "def add(a, b):", "max_tokens": 4})
        assert completion.status_code == 200  # the engines that fit serve while the others wait
    resident = {pk: sum(processes.rss_bytes(pid) for pid in pids) for pk, pids in engine_pids().items()}
    print(f"estimate {need.memory_bytes / GIB:.2f} GiB; measured resident per engine (GiB): "
          f"{ {pk: round(b / GIB, 2) for pk, b in resident.items()} }")

    services.scale_deployment(deployment, min_replicas=0, actor=FLEET)
    converge(deployment.pk, lambda: not engine_pids() and not Instance.objects.filter(
        deployment=deployment, state__in=[S.PENDING, S.STARTING, S.READY, S.DRAINING]).exists(), timeout=300)
