"""A transactional test finds the migrated database whatever ran before it (tests/conftest.py).

The tests run in this order on purpose, each after the kind of flush that broke the next one:
a plain transactional test (its flush re-creates content types under new ids, and a serialized
rollback then failed restoring its copy: duplicate content type), a serialized-rollback test (its
flush skips post_migrate), and a plain transactional test that needs what the migrations wrote —
the audit chain head, the default GPU prices — as test_concurrent_reconcile did after
test_concurrent_appends.
"""
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.core.management import call_command

from audit.actor import Actor
from audit.models import AuditChainHead
from audit.services import record_event

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.django_db(transaction=True)
def test_first_a_plain_transactional_test_writes():
    record_event(actor=Actor.system("first"), action="test.first")


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_then_a_serialized_rollback_test_starts_from_its_copy_and_writes():
    from django.contrib.contenttypes.models import ContentType

    assert ContentType.objects.filter(app_label="fleet", model="instance").count() == 1
    record_event(actor=Actor.system("second"), action="test.second")
    assert AuditChainHead.objects.get(pk=1).seq >= 1


@pytest.mark.django_db(transaction=True)
def test_and_the_next_transactional_test_still_has_the_migrated_rows():
    from usage.models import GpuPrice

    assert AuditChainHead.objects.filter(pk=1).exists()
    assert GpuPrice.objects.filter(gpu_type="cpu").exists()
    record_event(actor=Actor.system("third"), action="test.third")
    call_command("audit_verify")


# The order that failed on PostgreSQL, in a session of its own: which tests a session collects
# decided whether there was a migrated copy to restore (none without a serialized-rollback test).
PREVIOUSLY_FAILING_ORDER = (
    "tests/audit/test_concurrent_appends.py",
    "tests/fleet/test_concurrent_reconcile.py",
    "tests/test_database_state_between_tests.py::test_first_a_plain_transactional_test_writes",
    "tests/test_database_state_between_tests.py::test_and_the_next_transactional_test_still_has_the_migrated_rows",
)


@pytest.mark.slow
def test_a_session_of_transactional_tests_alone_keeps_the_migrated_rows(tmp_path):
    env = {**os.environ, "SWITCHYARD_VAR_DIR": str(tmp_path / "var")}
    if os.environ.get("DATABASE_URL"):  # its own test database: this session's is in use
        url = urlsplit(os.environ["DATABASE_URL"])
        env["DATABASE_URL"] = urlunsplit(url._replace(path=f"{url.path}_order"))
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *PREVIOUSLY_FAILING_ORDER],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " failed" not in result.stdout and " passed" in result.stdout
