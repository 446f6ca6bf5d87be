"""Shared fixtures: the alice / bob / charlie trio.

alice owns tenant A, bob owns tenant B, charlie is platform staff. Each owner also has an
admin-scoped API key. Isolation tests are then one line: alice's credentials on B's objects.
"""
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.db.backends.signals import connection_created
from rest_framework.test import APIClient

from tests.factories import make_key, make_member, make_tenant, make_user
from tests.processes import ENGINE_PYTHON


def _allow_audit_maintenance(sender, connection, **kwargs):
    # The PostgreSQL append-only trigger would block test-database teardown (TRUNCATE between
    # transactional tests); tests that check the trigger switch this back off for themselves.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET switchyard.audit_maintenance = 'on'")


connection_created.connect(_allow_audit_maintenance, dispatch_uid="tests_audit_maintenance")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Put back what migrations wrote after a serialized-rollback test.

    Django flushes after such a test *without* post_migrate, on the assumption that the next test
    restores the serialized copy too. Only serialized-rollback tests do, so a plain transactional
    test that came next found the database empty: no audit chain head (every audited write
    failed), no default GPU prices. Restoring the copy here leaves every test the migrated state.
    """
    yield
    if _used_serialized_rollback(item):
        _restore_serialized_databases(item.config)


def _used_serialized_rollback(item) -> bool:
    marker = item.get_closest_marker("django_db")
    return bool((marker is not None and marker.kwargs.get("serialized_rollback"))
                or "django_db_serialized_rollback" in getattr(item, "fixturenames", ())
                or getattr(getattr(item, "cls", None), "serialized_rollback", False))


def _restore_serialized_databases(config) -> None:
    from django.db import connections
    from pytest_django.plugin import blocking_manager_key

    with config.stash[blocking_manager_key].unblock():
        for connection in connections.all(initialized_only=True):
            contents = getattr(connection, "_test_serialized_contents", None)
            if contents:
                connection.creation.deserialize_db_from_string(contents)


@pytest.fixture(scope="session", autouse=True)
def audit_every_rejected_key():
    """Suites that count `auth.api_key_rejected` rows expect one per attempt: sampling off by default
    (tests/apikeys/test_rejection_sampling.py turns it on and checks it)."""
    from django.test.utils import override_settings

    with override_settings(SWITCHYARD_REJECTED_KEY_AUDIT_WINDOW_SECONDS=0):
        yield


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """tiny-coder's files, made once per run by `manage.py make_tiny_model` with the engine's Python."""
    from django.core.management import call_command

    model_dir = tmp_path_factory.mktemp("models") / "tiny-coder"
    call_command("make_tiny_model", str(model_dir), python=str(ENGINE_PYTHON))
    return model_dir


@pytest.fixture(scope="session")
def tiny_vllm_url(tiny_model_dir, tmp_path_factory) -> str:
    """One real CPU vLLM serving tiny-coder with the registry's rendered flags, shared by every
    `vllm` test that only needs an engine to talk to (the fleet journey starts its own)."""
    from models_registry.engine_args import render_vllm_argv
    from models_registry.models import Model, ModelFamily, ModelVersion
    from models_registry.services import TINY_CODER, TINY_CODER_ENGINE_ARGS
    from tests.processes import free_port, start_vllm, stop

    version = ModelVersion(model=Model(name=TINY_CODER, family=ModelFamily.LLAMA), version="v1", dtype="float32",
                           artifact_uri=str(tiny_model_dir), engine_args=TINY_CODER_ENGINE_ARGS)
    argv = render_vllm_argv(version, model_path=str(tiny_model_dir), served_model_name=TINY_CODER, port=free_port())
    proc, url = start_vllm(argv, tmp_path_factory.mktemp("logs") / "vllm.log")
    yield url
    stop(proc, grace=30)


def pytest_collection_modifyitems(config, items):
    """`vllm` tests need .venv-engine: skipped without it, except in CI where its absence fails."""
    if ENGINE_PYTHON.exists():
        return
    if os.environ.get("SWITCHYARD_REQUIRE_ENGINE") == "1":
        raise pytest.UsageError(f"SWITCHYARD_REQUIRE_ENGINE=1 but {ENGINE_PYTHON} is missing (make engine)")
    skip = pytest.mark.skip(reason="no .venv-engine: run `make engine` to build the CPU vLLM")
    for item in items:
        if "vllm" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def tenant_a(db):
    return make_tenant("tenant-a")


@pytest.fixture
def tenant_b(db):
    return make_tenant("tenant-b")


@pytest.fixture
def alice(tenant_a):
    user = make_member(tenant_a, "owner", make_user("alice"))
    return SimpleNamespace(user=user, tenant=tenant_a, key=make_key(tenant_a, user).raw)


@pytest.fixture
def bob(tenant_b):
    user = make_member(tenant_b, "owner", make_user("bob"))
    return SimpleNamespace(user=user, tenant=tenant_b, key=make_key(tenant_b, user).raw)


@pytest.fixture
def charlie(db):
    return SimpleNamespace(user=make_user("charlie", staff=True))


def bearer(raw_key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return client


@pytest.fixture
def api():
    """A client with no credentials."""
    return APIClient()
