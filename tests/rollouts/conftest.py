"""Rollout fixtures: a deployment of version A with two ready engines, and a published version B of the same model."""
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.utils import timezone

from audit.actor import Actor
from fleet import reconcile
from fleet.models import Deployment, Instance
from fleet.states import InstanceState
from tests.fleet.conftest import fleet_settings, make_version, no_engine_left_behind  # noqa: F401 (autouse)

ADMIN = Actor.system("rollout-tests")
S = InstanceState


@dataclass
class World:
    deployment: Deployment
    a: object
    b: object


@pytest.fixture
def world(db, settings) -> World:
    settings.SWITCHYARD_SIMULATOR_MEMORY_MB = 1
    a, b = make_version(), make_version(artifact_uri="fleet-tiny-coder-b")
    deployment = Deployment.objects.create(name="coder", model_version=a, min_replicas=2, max_replicas=2,
                                           runtime_backend="simulator")
    reconcile._plan(deployment.pk)
    mark_ready(Instance.objects.filter(deployment=deployment))
    return World(deployment, a, b)


def mark_ready(instances) -> None:
    """Engines came up (what the health checks record): observed state, set here without processes."""
    for instance in instances.filter(state=S.PENDING):
        Instance.objects.filter(pk=instance.pk).update(state=S.READY, ready_at=timezone.now(),
                                                       endpoint_url=f"http://127.0.0.1:{9000 + instance.pk}")


def serve(deployment, version, *, ok: int = 0, errors: int = 0, ttft_ms: float = 100.0, ago: float = 0.0,
          retried_from: int | None = None) -> None:
    """Requests the gateway metered on this version's engines, stored by the real usage ingest."""
    from usage.services import record_usage_batch

    instance = Instance.objects.filter(deployment=deployment, model_version=version).order_by("pk").first()
    at = timezone.now() - timedelta(seconds=ago)
    start = Instance.objects.count() * 100_000 + serve.counter
    serve.counter += ok + errors
    events = [{"request_id": f"r-{start + n}", "occurred_at": at, "tenant": deployment.tenant, "status_code": 200,
               "outcome": "ok", "model_version_id": version.pk, "instance_id": instance.pk, "ttft_ms": ttft_ms,
               "latency_ms": ttft_ms * 2, "retried_instance_id": retried_from} for n in range(ok)]
    events += [{"request_id": f"r-{start + ok + n}", "occurred_at": at, "tenant": deployment.tenant,
                "status_code": 500, "outcome": "upstream_error", "model_version_id": version.pk,
                "instance_id": instance.pk, "latency_ms": 5.0} for n in range(errors)]
    record_usage_batch(events)


serve.counter = 0
