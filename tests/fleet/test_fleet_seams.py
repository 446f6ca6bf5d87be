"""The fleet seams the Kubernetes backend needs: orphans stopped by their own backend, no lock held while an
engine starts, and health passes that probe concurrently and never overlap."""
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection

from fleet import health, leases, reconcile, stopping
from fleet.models import Deployment, Instance
from fleet.services import scale_deployment
from fleet.states import InstanceState
from fleet.transitions import FLEET
from tests.fleet.conftest import make_version
from tests.fleet.fake_backends import BOOKS, RecordingBackend, configured

S = InstanceState
# Two connections at once (and a flush past the registry's triggers) need a server database: CI runs them.
server_database = pytest.mark.skipif(connection.vendor != "postgresql",
                                     reason="two connections at once need PostgreSQL")


@pytest.fixture
def fakes(settings):
    settings.SWITCHYARD_RUNTIME_BACKENDS = configured("fake-a", "fake-b")
    BOOKS.clear()
    yield
    RecordingBackend.on_start = None
    BOOKS.clear()


def deploy(backend: str, replicas: int = 1, **fields) -> Deployment:
    return Deployment.objects.create(name=f"d-{backend}-{Deployment.objects.count()}", model_version=make_version(),
                                     min_replicas=replicas, max_replicas=max(replicas, 1), runtime_backend=backend,
                                     **fields)


@pytest.mark.django_db
def test_each_orphan_is_stopped_by_the_backend_that_reported_it(fakes):
    live = Instance.objects.create(deployment=deploy("fake-a"), state=S.STARTING)
    BOOKS["fake-a"]["running"].update({live.pk: {}, 9001: {}})
    BOOKS["fake-b"]["running"].update({9002: {}, 9003: {}})
    assert reconcile.sweep_orphans() == [9001, 9002, 9003]
    assert BOOKS["fake-a"]["stopped_orphans"] == [9001]
    assert BOOKS["fake-b"]["stopped_orphans"] == [9002, 9003]
    assert live.pk in BOOKS["fake-a"]["running"]


@server_database
@pytest.mark.django_db(transaction=True)
def test_no_lock_is_held_while_an_engine_starts(fakes):
    """A scale of the same deployment, in another connection, completes while start() is still running."""
    deployment = deploy("fake-a", replicas=1)
    meanwhile = {}

    def scale_while_starting(instance):
        def scale():
            try:
                scale_deployment(Deployment.objects.get(pk=deployment.pk), actor=FLEET, max_replicas=3)
                meanwhile["scaled"] = True
            finally:
                connection.close()
        other = threading.Thread(target=scale)
        other.start()
        other.join(timeout=15)  # the old code held the deployment row (or SQLite's write lock) across start()
        meanwhile["finished_during_start"] = not other.is_alive()
        other.join()

    RecordingBackend.on_start = scale_while_starting
    reconcile.reconcile_deployment(deployment.pk)
    assert meanwhile == {"scaled": True, "finished_during_start": True}
    instance = Instance.objects.get(deployment=deployment)
    assert instance.state == S.STARTING and instance.endpoint_url and instance.launch_claim == ""


@server_database
@pytest.mark.django_db(transaction=True)
def test_an_instance_drained_while_its_engine_starts_is_stopped_only_once_that_engine_is(fakes):
    """A stopped row promises its engine is gone: the drain waits for the start, then stops what it started."""
    deployment = deploy("fake-a", replicas=1)
    seen = {}

    def scale_to_zero(instance):
        def scale():
            try:
                scale_deployment(Deployment.objects.get(pk=deployment.pk), actor=FLEET, min_replicas=0)
                reconcile.reconcile_deployment(deployment.pk)  # plans the scale-down: drains the instance
                seen["state"] = Instance.objects.get(pk=instance.pk).state
                seen["drain_done"] = stopping.drain_step(instance.pk)
            finally:
                connection.close()
        other = threading.Thread(target=scale)
        other.start()
        other.join()

    RecordingBackend.on_start = scale_to_zero
    reconcile.reconcile_deployment(deployment.pk)
    assert seen == {"state": S.DRAINING, "drain_done": False}  # not stopped while its engine was starting
    instance = Instance.objects.get(deployment=deployment)
    assert instance.state == S.DRAINING and instance.endpoint_url and not instance.launch_claim
    assert stopping.drain_step(instance.pk) is True
    assert Instance.objects.get(pk=instance.pk).state == S.STOPPED
    assert BOOKS["fake-a"]["stopped"] == [instance.pk] and BOOKS["fake-a"]["running"] == {}


@server_database
@pytest.mark.django_db(transaction=True)
def test_a_second_worker_does_not_launch_an_instance_being_launched(fakes):
    deployment = deploy("fake-a", replicas=1)
    second = {}

    def race(instance):
        def other_worker():
            try:
                second["launched"] = reconcile._launch(deployment.pk)
            finally:
                connection.close()
        thread = threading.Thread(target=other_worker)
        thread.start()
        thread.join()

    RecordingBackend.on_start = race
    reconcile.reconcile_deployment(deployment.pk)
    assert second == {"launched": 0}
    assert BOOKS["fake-a"]["started"] == [Instance.objects.get(deployment=deployment).pk]


@pytest.mark.django_db
def test_a_claim_left_by_a_dead_worker_is_taken_over(fakes):
    from datetime import timedelta

    from django.utils import timezone

    deployment = deploy("fake-a", replicas=1)
    reconcile._plan(deployment.pk)
    instance = Instance.objects.get(deployment=deployment)
    Instance.objects.filter(pk=instance.pk).update(launch_claim="dead", launch_claimed_at=timezone.now())
    assert reconcile._launch(deployment.pk) == 0  # a fresh claim: somebody is launching it
    Instance.objects.filter(pk=instance.pk).update(launch_claimed_at=timezone.now() - timedelta(minutes=5))
    assert reconcile._launch(deployment.pk) == 1
    assert Instance.objects.get(pk=instance.pk).state == S.STARTING


class _SlowHealth(BaseHTTPRequestHandler):
    """Answers /health after a pause, counting how many probes are in flight at once."""

    lock = threading.Lock()
    in_flight = 0
    most = 0
    release = threading.Event()

    def do_GET(self):
        cls = type(self)
        with cls.lock:
            cls.in_flight += 1
            cls.most = max(cls.most, cls.in_flight)
        cls.release.wait(5)
        with cls.lock:
            cls.in_flight -= 1
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_health_server():
    _SlowHealth.in_flight = _SlowHealth.most = 0
    _SlowHealth.release.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowHealth)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    _SlowHealth.release.set()
    server.shutdown()
    server.server_close()


@server_database
@pytest.mark.django_db(transaction=True)
def test_a_health_pass_probes_engines_concurrently_within_its_bound(settings, slow_health_server):
    settings.SWITCHYARD_FLEET_PROBE_CONCURRENCY = 3
    settings.SWITCHYARD_FLEET_PROBE_TIMEOUT_SECONDS = 10.0
    settings.SWITCHYARD_SIMULATOR_MEMORY_MB = 1
    deployment = deploy("simulator", replicas=0)
    instances = [Instance.objects.create(deployment=deployment, state=S.READY, endpoint_url=slow_health_server)
                 for _ in range(6)]
    from unittest import mock

    def release_when_three_wait():
        while _SlowHealth.most < 3 and not _SlowHealth.release.is_set():
            _SlowHealth.release.wait(0.05)
        _SlowHealth.release.set()

    threading.Thread(target=release_when_three_wait, daemon=True).start()
    with mock.patch("fleet.runtime.process_backend.ProcessBackend.is_alive", return_value=True):
        counts = health.check_all()
    assert counts == {"ok": 6}
    assert _SlowHealth.most == 3  # several at once, never more than the bound
    assert all(i.last_health_ok for i in Instance.objects.filter(pk__in=[i.pk for i in instances]))


@pytest.mark.django_db
def test_a_health_pass_is_skipped_while_another_runs_and_the_lease_expires_by_itself(settings):
    with leases.held("fleet.health_check", ttl=60) as ours:
        assert ours
        assert health.check_all() == {"skipped": 1}
    assert health.check_all() == {}  # released: the next pass runs (nothing to probe)
    with leases.held("fleet.health_check", ttl=0):  # a holder that died: its lease has already expired
        assert health.check_all() == {}


@pytest.mark.django_db
def test_backends_that_observe_themselves_are_not_probed(fakes):
    instance = Instance.objects.create(deployment=deploy("fake-a"), state=S.READY, endpoint_url="http://127.0.0.1:9")
    assert health.check_all() == {}
    assert Instance.objects.get(pk=instance.pk).last_health_at is None
