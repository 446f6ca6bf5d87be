"""Fleet fixtures: a published model version, fast fleet settings, and no engine left behind.

Engines started by a test carry this session's fleet namespace, so the clean-up kills exactly
what this run started (another run, or a developer's fleet, uses another namespace). The engine
token comes from the test database's install row, which a flush replaces: the clean-up therefore
goes by namespace and uses whatever token each engine carries.
"""
import os
import uuid

import pytest

from fleet.runtime import processes

NAMESPACE = f"test-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def make_version(name: str = "tiny-coder", *, status: str = "published", artifact_uri: str = "fleet-tiny-coder"):
    from models_registry.models import Model, ModelVersion

    model, _ = Model.objects.get_or_create(name=name)
    return ModelVersion.objects.create(model=model, version=f"v{ModelVersion.objects.count() + 1}",
                                       artifact_uri=artifact_uri, status=status, max_context=1024)


@pytest.fixture
def published_version(db):
    return make_version()


@pytest.fixture
def draft_version(db):
    return make_version(status="draft")


@pytest.fixture
def staff_client(charlie):
    """A platform admin's API client (charlie is staff)."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(charlie.user)
    return client


@pytest.fixture(autouse=True)
def fleet_settings(settings, tmp_path):
    """Small back-off and grace so failure paths run in seconds; engine logs in the test's tmp dir."""
    settings.SWITCHYARD_FLEET_NAMESPACE = NAMESPACE
    settings.SWITCHYARD_ENGINE_LOG_DIR = tmp_path / "engines"
    settings.SWITCHYARD_FLEET_BACKOFF_BASE_SECONDS = 1
    settings.SWITCHYARD_FLEET_BACKOFF_MAX_SECONDS = 4
    settings.SWITCHYARD_FLEET_STOP_GRACE_SECONDS = 2
    settings.SWITCHYARD_FLEET_PROBE_TIMEOUT_SECONDS = 1.0
    settings.SWITCHYARD_FLEET_HEALTH_FAILURES = 2
    settings.SWITCHYARD_FLEET_DRAIN_DEADLINE_SECONDS = 5
    yield settings


@pytest.fixture(autouse=True)
def no_engine_left_behind(fleet_settings):
    """Kill every engine of this run's namespace after each test, pass or fail."""
    yield
    for owner, instance_id in namespace_engines():
        processes.kill_instance(owner, instance_id, 1.0)


def namespace_engines() -> set[tuple[processes.EngineOwner, int]]:
    """(owner, instance id) of every engine in this run's namespace, whichever install row started it."""
    return {(processes.EngineOwner(NAMESPACE, tags.get(processes.TOKEN_VAR, "")), int(tags[processes.INSTANCE_VAR]))
            for tags, _ in processes.engine_processes() if tags.get(processes.NAMESPACE_VAR) == NAMESPACE}


def engine_pids() -> dict[int, set[int]]:
    """Instance id → pids of its live processes in this run's namespace (what `ps` would show)."""
    found: dict[int, set[int]] = {}
    for tags, proc in processes.engine_processes():
        if tags.get(processes.NAMESPACE_VAR) == NAMESPACE:
            found.setdefault(int(tags[processes.INSTANCE_VAR]), set()).add(proc["pid"])
    return found
