"""Shared fixtures: the alice / bob / charlie trio.

alice owns tenant A, bob owns tenant B, charlie is platform staff. Each owner also has an
admin-scoped API key. Isolation tests are then one line: alice's credentials on B's objects.
"""
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.db.backends.signals import connection_created
from django.test import TestCase, TransactionTestCase
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
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

# Property tests judge what is generated, never how fast: on a loaded 2-core host (CI beside other work)
# Hypothesis's generation-speed health checks and per-example deadline failed correct tests. Every
# property test gets this profile; one that sets its own `settings` still overrides it.
hypothesis_settings.register_profile(
    "switchyard", deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
hypothesis_settings.load_profile("switchyard")


# The browser tests' shared fixture (`browser`: one headless Chromium per module), wherever they live.
pytest_plugins = ["tests.console.browser"]


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings, tmp_path_factory):
    """On SQLite, the tests' database is a file in WAL mode, as the embedded install's is.

    Django's default SQLite test database is in memory with a shared cache, where a connection that
    meets another's write on a table fails at once with "database table is locked" (SQLITE_LOCKED,
    which no busy timeout waits out). The gateway under test runs in threads of the test process:
    its usage inserts made the test's reads fail, its key and budget lookups met the test's writes —
    more often the more loaded the machine. In a WAL file readers never wait and a writer waits its
    turn (settings: timeout), as in production.
    """
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3" and not database.get("TEST", {}).get("NAME"):
        database.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("sqlite") / "test.sqlite3")


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """Keep the migrated copy of every test database, whichever tests this session collected.

    pytest-django serializes a database only when a collected test asks for serialized_rollback;
    without one (most subsets of the suite, `-m "not vllm"` runs) there was no copy to restore, so
    the first transactional test's flush left every later one without the migrations' rows (the
    default GPU prices, the install identity; the audit head only by grace of post_migrate).
    """
    from django.db import connections

    with django_db_blocker.unblock():
        for connection in connections.all(initialized_only=True):
            if not getattr(connection, "_test_serialized_contents", None):
                connection._test_serialized_contents = connection.creation.serialize_db_to_string()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Leave the database as the migrations left it after every transactional test.

    Django flushes after a transactional test; after a serialized-rollback one it skips
    post_migrate, assuming the next test restores the serialized copy too — only serialized-rollback
    tests do, so a plain transactional test that came next found no audit chain head (every
    audited write failed). After a plain one it runs post_migrate, which recreates content types
    under new ids, and a serialized-rollback test that came next failed restoring its copy on top
    of them. Emptying and restoring the copy after each of them gives every test the same start.
    """
    yield
    # After the last test the session's teardown has already dropped the test database.
    if nextitem is not None and _flushes_the_database(item):
        _restore_serialized_databases(item.config)


def _flushes_the_database(item) -> bool:
    marker = item.get_closest_marker("django_db")
    kwargs = marker.kwargs if marker is not None else {}
    fixtures = set(getattr(item, "fixturenames", ()))
    test_class = getattr(item, "cls", None)
    return bool(kwargs.get("transaction") or kwargs.get("serialized_rollback")
                or fixtures & {"transactional_db", "live_server", "django_db_serialized_rollback"}
                or (test_class is not None and issubclass(test_class, TransactionTestCase)
                    and not issubclass(test_class, TestCase)))


def _restore_serialized_databases(config) -> None:
    from django.core.management import call_command
    from django.db import connections
    from pytest_django.plugin import blocking_manager_key

    with config.stash[blocking_manager_key].unblock():
        for connection in connections.all(initialized_only=True):
            contents = getattr(connection, "_test_serialized_contents", None)
            if contents:
                call_command("flush", verbosity=0, interactive=False, database=connection.alias,
                             reset_sequences=False, inhibit_post_migrate=True)
                connection.creation.deserialize_db_from_string(contents)
                _sequences_past_the_restored_rows(connection)


def _sequences_past_the_restored_rows(connection) -> None:
    """The copy is loaded with its own ids while the sequences stay where they were: after a test that ran
    `manage.py flush` (which resets them to 1; tests/audit/test_database_guards.py) the next insert took id 1
    again (duplicate key), as `loaddata` would without its sequence reset."""
    from django.apps import apps
    from django.core.management.color import no_style

    statements = connection.ops.sequence_reset_sql(no_style(), apps.get_models(include_auto_created=True))
    if statements:
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)


def pytest_configure(config):
    """Pages link static files by their plain names, found in the source folders (as the live server's
    handler serves them), so tests need no `collectstatic` first, and WhiteNoise gets an empty
    STATIC_ROOT. Set before collection: some modules build the app at import. tests/test_static_files.py
    collects them with the real storage (hashed names, gzip, manifest) and serves them through the ASGI app."""
    from django.conf import settings

    root = tempfile.mkdtemp(prefix="switchyard-static-")
    config.add_cleanup(lambda: shutil.rmtree(root, ignore_errors=True))
    settings.STATIC_ROOT = root
    settings.STORAGES = {**settings.STORAGES,
                         "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}


VLLM_GROUP = "vllm"


@pytest.hookimpl(trylast=True)  # after pytest-django's own reordering
def pytest_collection_modifyitems(config, items):
    """How `make test` spreads the suite over processes (pytest-xdist, `-n N --dist loadgroup`; docs/operations.md).

    A test file is one unit of work, so its module-scoped fixtures (gateways, simulators, servers) start once.
    Every test of a real vLLM engine is one unit, run first and alone in one process: never two session engines,
    never two real-engine journeys at once on a 2-core host (they share var/models and the host's admission), and
    the longest unit starts first. Without `-n` only the order changes.
    """
    _skip_vllm_tests_without_an_engine(items)
    vllm, rest = [], []
    for item in items:
        (vllm if item.get_closest_marker("vllm") is not None else rest).append(item)
    # The journeys that start their own engines before the session engine (it lives until the process ends).
    vllm.sort(key=lambda item: "tiny_vllm" in getattr(item, "fixturenames", ()))
    items[:] = vllm + rest
    _unique_node_ids(items)
    if getattr(config.option, "loadgroup", False):  # set by xdist in its workers for --dist loadgroup
        for item in items:
            # xdist's loadgroup reads the group after "@" in the node id (its xdist_group hook runs before this one,
            # and sets an attribute pytest 9 no longer reads: the marks alone grouped nothing).
            _set_node_id(item, f"{item.nodeid}@{VLLM_GROUP if item in vllm else item.nodeid.split('::', 1)[0]}")


def _set_node_id(item, nodeid: str) -> None:
    """pytest 9 keeps a node's id as `_id` (a NodeId); checked, so that an upgrade that moves it fails here."""
    from _pytest.nodeid import coerce_node_id

    item._id = coerce_node_id(nodeid)
    assert item.nodeid == nodeid, "pytest no longer keeps node ids where tests/conftest.py sets them"


def _unique_node_ids(items) -> None:
    """schemathesis gives every API operation's test the same node id (only the name carries `[GET /path]`):
    xdist schedules by node id, so it ran one operation of 92 and dropped the rest without a word."""
    for item in items:
        base = item.nodeid.rsplit("::", 1)[-1]
        if not item.nodeid.endswith(item.name) and item.name.startswith(f"{base}["):
            _set_node_id(item, item.nodeid + item.name[len(base):])
    duplicates = len(items) - len({item.nodeid for item in items})
    assert duplicates == 0, f"{duplicates} tests share a node id: xdist would run only one of each"


@pytest.fixture
def audit_head(transactional_db):
    """A transactional database as the migrations left it: the chain head every audited write locks."""
    from audit.models import AuditChainHead

    assert AuditChainHead.objects.filter(pk=1).exists(), "an earlier transactional test left no chain head"


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
def tiny_vllm_url(tiny_vllm) -> str:
    """The session engine's base URL."""
    return tiny_vllm.url


@dataclass(frozen=True)
class SessionEngine:
    url: str
    log_path: Path  # the engine's output since start-up (its KV-capacity line, tests/capacity)
    pid: int  # the API server's; the engine core and its worker are its descendants


@pytest.fixture(scope="session")
def tiny_vllm(tiny_model_dir, tmp_path_factory) -> SessionEngine:
    """One real CPU vLLM serving tiny-coder with the registry's rendered flags, shared by every
    `vllm` test that only needs an engine to talk to (the fleet journey starts its own)."""
    from models_registry.engine_args import render_vllm_argv
    from models_registry.models import Model, ModelVersion
    from models_registry.services import TINY_CODER, TINY_CODER_ENGINE_ARGS, TINY_CODER_FAMILY
    from tests.processes import free_port, start_vllm, stop

    version = ModelVersion(model=Model(name=TINY_CODER, family=TINY_CODER_FAMILY), version="v1", dtype="float32",
                           artifact_uri=str(tiny_model_dir), engine_args=TINY_CODER_ENGINE_ARGS)
    argv = render_vllm_argv(version, model_path=str(tiny_model_dir), served_model_name=TINY_CODER, port=free_port())
    log_path = tmp_path_factory.mktemp("logs") / "vllm.log"
    proc, url = start_vllm(argv, log_path)
    yield SessionEngine(url, log_path, proc.pid)
    stop(proc, grace=30)


def _skip_vllm_tests_without_an_engine(items) -> None:
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
