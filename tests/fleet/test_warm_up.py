"""An engine that becomes ready gets one warm-up request from the fleet, so no user's request is its first
(fleet/warmup.py): through the real health pass and a real simulator engine that records what it received."""
import json

import pytest

from fleet import services, warmup
from fleet.models import BuiltinRuntime, Instance
from fleet.states import InstanceState
from fleet.transitions import FLEET
from simulator.recording import read_requests
from tests.fleet.fleet_helpers import converge, ready_ids

S = InstanceState
pytestmark = pytest.mark.django_db(transaction=True)


def recorded(path) -> list[dict]:
    return [json.loads(body) for _, body in read_requests(path)] if path.exists() else []


def test_an_engine_that_becomes_ready_is_sent_the_warm_up_request_once(published_version, tmp_path, monkeypatch):
    from fleet import tasks

    warmed = []
    # The task as the worker would run it, here and now (this test has no worker).
    monkeypatch.setattr(tasks.warm_up, "delay", lambda pk: warmed.append(warmup.warm_up(pk)))
    log = tmp_path / "requests.log"
    deployment = services.create_deployment(
        tenant=None, name="warm-up", model_version=published_version, min_replicas=1, max_replicas=1,
        runtime_backend=BuiltinRuntime.SIMULATOR, actor=FLEET,
        simulator_params={"decode_ms_per_token": 1.0, "prefill_ms_per_token": 0.01, "record_requests": str(log)})
    (instance_id,) = converge(deployment.pk, lambda: ready_ids(deployment.pk))
    converge(deployment.pk, lambda: True)  # one more health pass: ready already, so no second warm-up
    assert [w["instance"] for w in warmed] == [instance_id] and warmed[0]["ok"] is True, warmed
    assert recorded(log) == [warmup.warm_up_body(published_version.model.name)]
    services.delete_deployment(deployment, actor=FLEET)
    converge(deployment.pk, lambda: not Instance.objects.filter(deployment=deployment).exclude(
        state__in=(S.STOPPED, S.FAILED)).exists())


def test_an_instance_no_longer_ready_is_not_warmed_up(published_version):
    deployment = services.create_deployment(tenant=None, name="gone", model_version=published_version,
                                            min_replicas=0, max_replicas=1, runtime_backend=BuiltinRuntime.SIMULATOR,
                                            actor=FLEET)
    instance = Instance.objects.create(deployment=deployment, state=S.STOPPED, endpoint_url="http://127.0.0.1:9")
    assert warmup.warm_up(instance.pk) == {"instance": instance.pk, "skipped": "not ready"}


def test_an_engine_that_refuses_the_warm_up_is_reported_not_raised(published_version):
    deployment = services.create_deployment(tenant=None, name="refuses", model_version=published_version,
                                            min_replicas=0, max_replicas=1, runtime_backend=BuiltinRuntime.SIMULATOR,
                                            actor=FLEET)
    instance = Instance.objects.create(deployment=deployment, state=S.READY, endpoint_url="http://127.0.0.1:9")
    result = warmup.warm_up(instance.pk)
    assert result["ok"] is False and "ConnectError" in result["error"]
