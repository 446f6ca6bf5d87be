"""Warm instances take no traffic; a deployment asleep at zero wakes on the first request (the official
client's), which is served once an engine is up — or answered 503 with Retry-After past its wait."""
from __future__ import annotations

import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

from fleet.models import Instance, InstanceRole, ScalingPolicy
from fleet.states import InstanceState
from tests.gateway_app.conftest import MODEL, client_for
from tests.gateway_app.helpers import EchoEngine, add_deployment, make_model_version, usage_rows

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_warm_instance_is_not_routed_until_it_is_promoted(gateway, alice):
    serving, warm = EchoEngine(MODEL), EchoEngine(MODEL)
    try:
        deployment = add_deployment(make_model_version(MODEL), tenant=None, name="pool", urls=[serving.url, warm.url])
        warm_row = Instance.objects.get(deployment=deployment, endpoint_url=warm.url)
        Instance.objects.filter(pk=warm_row.pk).update(role=InstanceRole.WARM)
        server = gateway()
        server.wait_until_serving(alice.key.raw, MODEL)
        server.wait_synced()
        client = client_for(server, alice.key.raw)
        for _ in range(8):
            client.completions.create(model=MODEL, prompt="x", max_tokens=1)
        assert len(serving.bodies) == 8 and warm.bodies == []
        from fleet.transitions import set_role

        set_role(warm_row.pk, InstanceRole.SERVING)  # audited: the bus (or the marker) carries it
        deadline = time.monotonic() + 5
        while not warm.bodies and time.monotonic() < deadline:
            client.completions.create(model=MODEL, prompt="x", max_tokens=1)
        assert warm.bodies, "the promoted instance never took traffic"
    finally:
        serving.stop()
        warm.stop()


def asleep(tenant=None, wake_timeout: int = 30):
    version = make_model_version(MODEL)
    deployment = add_deployment(version, tenant=tenant, name="sleepy", urls=[], min_replicas=0, max_replicas=1,
                                serving_replicas=0)
    with transaction.atomic():
        ScalingPolicy.objects.create(deployment=deployment, wake_timeout_seconds=wake_timeout)
        from audit.services import record_event
        from tests.factories import SYSTEM

        record_event(actor=SYSTEM, action="fleet.deployment.scaling_policy", target=deployment)
    return deployment


def test_a_sleeping_deployment_wakes_on_the_first_request_and_serves_it(gateway, alice):
    deployment = asleep()
    engine = EchoEngine(MODEL)
    woken = []

    def fleet_wakes(deployment_id):  # stands in for fleet.wake + reconcile + the engine becoming ready
        woken.append(deployment_id)
        time.sleep(0.5)
        Instance.objects.create(deployment_id=deployment_id, state=InstanceState.READY, role=InstanceRole.SERVING,
                                endpoint_url=engine.url, ready_at=timezone.now())
        from audit.services import record_event
        from tests.factories import SYSTEM

        record_event(actor=SYSTEM, action="fleet.instance.ready", target=deployment)
        connection.close()

    try:
        server = gateway()
        server.app.state.waker._send = fleet_wakes
        server.wait_until_serving(alice.key.raw, MODEL)  # listed while asleep: it wakes on request
        answer = client_for(server, alice.key.raw).completions.with_raw_response.create(
            model=MODEL, prompt="wake up", max_tokens=1)
        assert answer.http_response.status_code == 200 and woken == [deployment.pk]
        waited = float(answer.headers["x-switchyard-wake-ms"])
        assert waited >= 400
        deadline = time.monotonic() + 5
        while not (rows := usage_rows(model_name=MODEL)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert rows and rows[0].wake_wait_ms == pytest.approx(waited, abs=1)
    finally:
        engine.stop()


def test_a_deployment_that_does_not_wake_in_time_is_a_503_with_retry_after(gateway, alice):
    asleep(wake_timeout=1)
    server = gateway()
    asked = []
    server.app.state.waker._send = asked.append
    server.wait_until_serving(alice.key.raw, MODEL)
    answer = server.post("/v1/completions", alice.key.raw, {"model": MODEL, "prompt": "x", "max_tokens": 1})
    assert answer.status_code == 503 and answer.headers["retry-after"] == "30"
    assert answer.json()["error"]["code"] == "no_capacity" and "waking from zero" in answer.json()["error"]["message"]
    assert len(asked) == 1
