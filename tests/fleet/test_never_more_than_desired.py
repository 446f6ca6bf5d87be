"""Never more instances than desired, and never an engine no row accounts for, however work interleaves.

Workers reconcile, probe, drain and clean up at once while an admin scales, drains and restarts
and engines get killed. Throughout, on PostgreSQL with real row locks:
  - live instances (pending, starting, ready) never exceed max_replicas;
  - every running engine belongs to a row that may have one (pending, starting, ready, draining,
    or failed and not yet reaped) — an engine of a stopped or reaped row is one too many.
"""
import os
import random
import signal
import threading
import time

import pytest
from django.db import connection

from fleet import health, reconcile, services, stopping
from fleet.models import BuiltinRuntime, Deployment, Instance
from fleet.states import LIVE_STATES, InstanceState
from fleet.transitions import FLEET
from tests.fleet.conftest import engine_pids, make_version

S = InstanceState
SECONDS = float(os.environ.get("SWITCHYARD_TEST_FLEET_STRESS_SECONDS", "20"))
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL")]


def may_have_an_engine(row) -> bool:
    state, released = row
    return state in (S.PENDING, S.STARTING, S.READY, S.DRAINING) or (state == S.FAILED and released is None)


def check_once(deployment_id: int, max_replicas: int, violations: list) -> None:
    rows = dict((pk, (state, released)) for pk, state, released in
                Instance.objects.filter(deployment_id=deployment_id).values_list("pk", "state", "released_at"))
    live = [pk for pk, (state, _) in rows.items() if state in LIVE_STATES]
    if len(live) > max_replicas:
        violations.append(f"{len(live)} live instances > max_replicas {max_replicas}: {rows}")
    newest = max(rows, default=0)
    for instance_id in engine_pids():  # read after the rows: an engine started since has a newer row
        if instance_id <= newest and not may_have_an_engine(rows.get(instance_id, (S.STOPPED, "gone"))):
            violations.append(f"engine of instance {instance_id} runs, but its row is {rows.get(instance_id)}")


def loop(stop: threading.Event, errors: list, step) -> None:
    try:
        while not stop.is_set():
            step()
    except Exception as exc:  # surfaced by the test thread
        errors.append(exc)
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_interleaved_fleet_work_never_exceeds_the_desired_count(settings):
    settings.SWITCHYARD_FLEET_BACKOFF_BASE_SECONDS = 0
    settings.SWITCHYARD_FLEET_BACKOFF_MAX_SECONDS = 0
    deployment = Deployment.objects.create(name="busy", model_version=make_version(), min_replicas=2, max_replicas=3,
                                           runtime_backend=BuiltinRuntime.SIMULATOR,
                                           simulator_params={"decode_ms_per_token": 1.0})
    rng, stop, errors, violations = random.Random(15), threading.Event(), [], []

    def admin():
        instances = list(Instance.objects.filter(deployment=deployment, state__in=LIVE_STATES))
        choice = rng.choice(["scale", "drain", "restart", "kill"])
        if choice == "scale":
            services.scale_deployment(deployment, min_replicas=rng.randint(0, 3), actor=FLEET)
        elif instances and choice in ("drain", "restart"):
            try:
                getattr(services, f"{choice}_instance")(rng.choice(instances), actor=FLEET)
            except Exception:  # lost a race with a worker: the instance moved on
                pass
        else:
            pids = [i.runtime_handle["pid"] for i in instances if (i.runtime_handle or {}).get("pid", 0) > 1]
            if pids:  # never 0 or 1: kill(0) would signal this test's own process group
                try:
                    os.kill(rng.choice(pids), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(rng.uniform(0.05, 0.4))

    def stop_work():
        for instance in Instance.objects.filter(deployment=deployment, state__in=[S.DRAINING, S.FAILED]):
            (stopping.drain_step if instance.state == S.DRAINING else stopping.clean_up_failed)(instance.pk)

    steps = [lambda: reconcile.reconcile_deployment(deployment.pk),
             lambda: reconcile.reconcile_deployment(deployment.pk),
             lambda: health.check_all(), stop_work, reconcile.sweep_orphans, admin]
    threads = [threading.Thread(target=loop, args=(stop, errors, step)) for step in steps]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + SECONDS
    try:
        while time.monotonic() < deadline and not errors:
            check_once(deployment.pk, deployment.max_replicas, violations)
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert errors == [] and violations == [], (errors, violations[:5])
