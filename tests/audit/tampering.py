"""What an attacker with write access to the database can do to audit rows, on either backend.

On PostgreSQL the append-only trigger stops UPDATE and DELETE; `tamper` first proves that, then
disables the trigger inside the test's transaction (rolled back with the test) and does it anyway.
"""
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from audit.chain import chain_hash, row_document
from audit.models import AuditEvent
from audit.services import record_event
from tests.factories import SYSTEM

ON_POSTGRES = connection.vendor == "postgresql"


def sql(statement: str, params=()) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def maintenance_off() -> None:
    # The test connection starts with maintenance 'on' (tests/conftest.py); attackers get no such pass.
    sql("SET LOCAL switchyard.audit_maintenance = 'off'")


def tamper(change, *, blocked: bool = True) -> None:
    """Apply `change()`; on PostgreSQL assert the trigger refuses it first when `blocked`."""
    if not ON_POSTGRES:
        change()
        return
    if blocked:
        with pytest.raises(DatabaseError, match="append-only"):
            with transaction.atomic():
                maintenance_off()
                change()
    with transaction.atomic():
        maintenance_off()
        sql("ALTER TABLE audit_auditevent DISABLE TRIGGER USER")
        change()
        sql("ALTER TABLE audit_auditevent ENABLE TRIGGER USER")


def make_chain(length: int = 6) -> list[AuditEvent]:
    """`length` genuine events, appended through the audit service."""
    return [record_event(actor=SYSTEM, action="test.event", after={"n": n}) for n in range(length)]


def forged(prev: AuditEvent | None, seq: int, prev_hash: str) -> AuditEvent:
    """A well-formed event at `seq` whose hash is correct for `prev_hash`."""
    event = AuditEvent(seq=seq, occurred_at=timezone.now() + timedelta(microseconds=seq), actor_label="mallory",
                       actor_type="system", action="tenant.delete", after={"forged": True}, prev_hash=prev_hash)
    event.hash = chain_hash(prev_hash, row_document(event))
    return event


def rehash_from(seq: int) -> None:
    """Recompute prev_hash/hash from `seq` on, as an attacker who knows the hashing rule would."""
    prev = AuditEvent.objects.filter(seq__lt=seq).order_by("-seq").first()
    prev_hash = prev.hash
    for event in AuditEvent.objects.filter(seq__gte=seq).order_by("seq"):
        event.prev_hash = prev_hash
        event.hash = chain_hash(prev_hash, row_document(event))
        AuditEvent.objects.filter(pk=event.pk).update(prev_hash=event.prev_hash, hash=event.hash)
        prev_hash = event.hash
