"""A transactional test finds the migrated database whatever ran before it (tests/conftest.py).

The two tests run in this order on purpose: the first is a serialized-rollback test, whose
teardown flush skips post_migrate; the second is a plain transactional test that needs what the
migrations wrote (the audit chain head, the default GPU prices) — as test_concurrent_reconcile
did after test_concurrent_appends.
"""
import pytest
from django.core.management import call_command

from audit.actor import Actor
from audit.models import AuditChainHead
from audit.services import record_event


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_serialized_rollback_test_writes_to_the_audit_chain():
    record_event(actor=Actor.system("first"), action="test.first")
    assert AuditChainHead.objects.get(pk=1).seq >= 1


@pytest.mark.django_db(transaction=True)
def test_the_next_transactional_test_still_has_the_migrated_rows():
    from usage.models import GpuPrice

    assert AuditChainHead.objects.filter(pk=1).exists()
    assert GpuPrice.objects.filter(gpu_type="cpu").exists()
    record_event(actor=Actor.system("second"), action="test.second")
    call_command("audit_verify")
