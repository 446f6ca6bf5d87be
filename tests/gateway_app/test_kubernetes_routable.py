"""A pod the watch reports ready becomes routable at the gateway within a second of the event (issue 15):
the stand-in API server (tests/fleet/kube_api.py) sends the event, `watch_engines`' observer marks the
instance ready (audited), the change bus carries it to the gateway, which then lists the model."""
from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from fleet import reconcile
from fleet.models import Deployment, Instance
from fleet.runtime import get_backend
from tests.fleet.kube_api import FakeKubernetes
from tests.gateway_app.conftest import MODEL
from tests.gateway_app.helpers import make_model_version

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(connection.vendor != "postgresql", reason="the watch thread needs PostgreSQL")]


@pytest.fixture
def kube(settings):
    api = FakeKubernetes().start()
    settings.SWITCHYARD_RUNTIME_BACKENDS = {
        **{k: v for k, v in settings.SWITCHYARD_RUNTIME_BACKENDS.items() if k in ("local", "simulator")},
        "kubernetes": {"class": "fleet.runtime.kubernetes.KubernetesBackend", "label": "Kubernetes",
                       "options": {"host": api.url, "weights_pvc": "w", "request_timeout_seconds": 5,
                                   "endpoint_template": "http://127.0.0.1:9/{namespace}/{service}"}}}
    yield api
    api.stop()


def test_a_pod_ready_event_makes_the_instance_routable_within_a_second(kube, gateway, alice):
    deployment = Deployment.objects.create(name="k", model_version=make_model_version(MODEL), min_replicas=1,
                                           max_replicas=1, runtime_backend="kubernetes")
    reconcile.reconcile_deployment(deployment.pk)
    instance = Instance.objects.get(deployment=deployment)
    server = gateway()
    server.wait_synced()
    assert MODEL not in server.models(alice.key.raw).text  # starting: not routable yet
    stop, observer = threading.Event(), get_backend("kubernetes").observer("kubernetes")

    def watch():
        try:
            observer.run(stop)
        finally:
            connection.close()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not observer.resource_version and time.monotonic() < deadline:
            time.sleep(0.02)
        event_at = time.monotonic()
        kube.set_pod_status(instance.runtime_handle["namespace"], instance.runtime_handle["name"], ready=True)
        while MODEL not in server.models(alice.key.raw).text and time.monotonic() - event_at < 5:
            time.sleep(0.01)
        lag = time.monotonic() - event_at
    finally:
        stop.set()
        kube.drop_watches()
        thread.join(timeout=10)
    print(f"pod ready → routable at the gateway: {lag:.3f} s")
    assert Instance.objects.get(pk=instance.pk).state == "ready"
    assert lag < 1.0
