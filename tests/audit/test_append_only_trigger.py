"""On PostgreSQL, audit rows cannot be updated, deleted or truncated, only appended."""
import pytest
from django.db import DatabaseError, transaction

from audit.models import AuditEvent
from tests.audit.tampering import ON_POSTGRES, forged, make_chain, maintenance_off, sql

pytestmark = [pytest.mark.django_db,
              pytest.mark.skipif(not ON_POSTGRES, reason="the append-only trigger exists only on PostgreSQL")]


@pytest.mark.parametrize("statement", [
    "UPDATE audit_auditevent SET actor_label = 'x' WHERE seq = 2",
    "UPDATE audit_auditevent SET seq = 99 WHERE seq = 3",
    "DELETE FROM audit_auditevent WHERE seq = 2",
    "DELETE FROM audit_auditevent",
    "TRUNCATE audit_auditevent",
])
def test_trigger_rejects_changes(statement):
    make_chain(3)
    with pytest.raises(DatabaseError, match="append-only"):
        with transaction.atomic():
            maintenance_off()
            sql(statement)
    assert AuditEvent.objects.filter(actor_label="x").count() == 0 and AuditEvent.objects.count() == 3


def test_orm_update_and_delete_are_rejected_too():
    events = make_chain(2)
    for change in (lambda: AuditEvent.objects.filter(seq=1).update(action="x"), lambda: events[1].delete()):
        with pytest.raises(DatabaseError, match="append-only"):
            with transaction.atomic():
                maintenance_off()
                change()
    assert AuditEvent.objects.count() == 2


def test_appending_is_allowed():
    events = make_chain(2)
    with transaction.atomic():
        maintenance_off()
        forged(events[-1], 3, events[-1].hash).save(force_insert=True)
    assert AuditEvent.objects.count() == 3


def test_maintenance_switch_is_the_only_way_through():
    make_chain(2)
    with transaction.atomic():
        sql("SET LOCAL switchyard.audit_maintenance = 'on'")
        sql("DELETE FROM audit_auditevent WHERE seq = 2")
    assert AuditEvent.objects.count() == 1
