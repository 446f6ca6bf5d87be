"""The fleet end to end with real vLLM engines (tiny model) and a real Celery worker + beat.

Needs .venv-engine, PostgreSQL (the worker process must see the test database) and Redis or the
filesystem broker. One journey keeps the module to a few minutes: deploy 2 → both ready and
serving → SIGKILL one → failed, replaced, no orphan → scale to 1 → delete → nothing left.
"""
import os
import signal
import subprocess
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from django.conf import settings
from django.db import connection

from fleet.models import Deployment, Instance
from fleet.states import InstanceState
from fleet.transitions import FLEET
from tests.fleet.conftest import NAMESPACE, engine_pids
from tests.fleet.fleet_helpers import wait_until
from tests.processes import stop

S = InstanceState
REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = "fleet-tiny-coder"  # under SWITCHYARD_MODEL_ROOT (var/models)
ENGINE_PYTHON = Path(settings.SWITCHYARD_ENGINE_PYTHON)

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(connection.vendor != "postgresql",
                       reason="the worker process needs a shared PostgreSQL test DB"),
    pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason="no .venv-engine (make engine)"),
]


def ensure_tiny_model() -> None:
    """Build the tiny Llama once (idempotent; a few seconds) with the engine venv."""
    target = Path(settings.SWITCHYARD_MODEL_ROOT) / MODEL_DIR
    subprocess.run([str(ENGINE_PYTHON), str(REPO / "models_registry" / "tiny_model_builder.py"), str(target)],
                   check=True, capture_output=True, timeout=600)


def worker_env(queue: str, log_dir: Path) -> dict:
    url = urlsplit(os.environ["DATABASE_URL"])
    test_db_url = urlunsplit(url._replace(path="/" + connection.settings_dict["NAME"]))
    return {**os.environ, "DATABASE_URL": test_db_url, "SWITCHYARD_CELERY_QUEUE": queue,
            "SWITCHYARD_FLEET_NAMESPACE": NAMESPACE, "SWITCHYARD_ENGINE_LOG_DIR": str(log_dir),
            "SWITCHYARD_FLEET_BACKOFF_BASE_SECONDS": "1", "SWITCHYARD_FLEET_STOP_GRACE_SECONDS": "5",
            "SWITCHYARD_FLEET_HEALTH_FAILURES": "2", "SWITCHYARD_FLEET_DRAIN_DEADLINE_SECONDS": "10",
            "SWITCHYARD_FLEET_START_DEADLINE_SECONDS": "600", "LOG_LEVEL": "INFO"}


@pytest.fixture
def celery_worker(request, tmp_path, fleet_settings):
    """A real `celery worker -B` on a queue of its own; stopped (whole process group) even on failure.
    Parametrized indirectly, its parameter is extra environment for the worker (settings a journey tunes)."""
    from controlplane.celery import app

    queue = f"fleet-test-{uuid.uuid4().hex[:8]}"
    fleet_settings.SWITCHYARD_ENGINE_LOG_DIR = tmp_path / "engines"
    app.conf.task_default_queue = queue  # so this process's on_commit reconciles reach that worker
    log = open(tmp_path / "worker.log", "wb")
    proc = subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "celery"), "-A", "controlplane", "worker", "-B", "-Q", queue,
         "--concurrency", "2", "--schedule", str(tmp_path / "beat-schedule"), "-l", "INFO"],
        cwd=REPO, env={**worker_env(queue, tmp_path / "engines"), **getattr(request, "param", {})}, stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True)
    yield proc
    stop(proc, grace=20)
    log.close()
    app.conf.task_default_queue = settings.CELERY_TASK_DEFAULT_QUEUE
    print((tmp_path / "worker.log").read_text()[-4000:])


def wait_for(what: str, condition, timeout: float = 600.0):
    def explain() -> str:
        return f"{what}; instances: {list(Instance.objects.values_list('pk', 'state', 'failure_reason'))}"

    return wait_until(condition, explain, timeout=timeout, interval=1)


def ready(deployment_id) -> dict[int, Instance]:
    return {i.pk: i for i in Instance.objects.filter(deployment_id=deployment_id, state=S.READY)}


def complete(instance: Instance) -> dict:
    body = {"model": "tiny-coder", "prompt": "def fibonacci(n):", "max_tokens": 8}
    response = httpx.post(instance.endpoint_url + "/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.django_db(transaction=True)
def test_real_vllm_fleet_journey(celery_worker, charlie):
    from rest_framework.test import APIClient

    from models_registry.services import ensure_tiny_coder

    ensure_tiny_model()
    client = APIClient()
    client.force_authenticate(charlie.user)
    version = ensure_tiny_coder(model_dir=Path(settings.SWITCHYARD_MODEL_ROOT) / MODEL_DIR, actor=FLEET)
    created = client.post("/api/v1/deployments/", {"name": "tiny", "model_version": version.pk,
                                                   "runtime_backend": "local", "min_replicas": 2,
                                                   "max_replicas": 2}, format="json")
    assert created.status_code == 201, created.content
    dep = created.json()["id"]

    first = wait_for("two ready engines", lambda: len(ready(dep)) == 2 and ready(dep))
    for instance in first.values():
        assert complete(instance)["usage"]["completion_tokens"] > 0

    victim = min(first.values(), key=lambda i: i.pk)
    victim_pids = engine_pids()[victim.pk]
    os.kill(victim.runtime_handle["pid"], signal.SIGKILL)
    wait_for("a replacement", lambda: len(ready(dep)) == 2 and victim.pk not in ready(dep), timeout=600)
    victim.refresh_from_db()
    assert victim.state == S.FAILED and victim.released_at is not None
    assert Instance.objects.get(replaces=victim).state == S.READY
    assert set(engine_pids()) == set(ready(dep)) and not (victim_pids & set().union(*engine_pids().values()))

    assert client.post(f"/api/v1/deployments/{dep}/scale/", {"min_replicas": 1}, format="json").status_code == 200
    # The drain stops the engine's process, then records STOPPED: wait for both, not just the first.
    wait_for("one engine after scale-down", lambda: len(ready(dep)) == 1 and len(engine_pids()) == 1
             and Instance.objects.filter(deployment_id=dep, state=S.STOPPED).count() == 1, timeout=180)

    assert client.delete(f"/api/v1/deployments/{dep}/").status_code == 202
    wait_for("the deployment removed", lambda: not Deployment.objects.filter(pk=dep).exists(), timeout=180)
    assert engine_pids() == {}
