"""What an attacker with write access to the database can do to the audit trail, on either backend.

`tamper(change)` first proves the database's guards refuse `change` (where this backend guards
it), then does it anyway the way someone with full control of the database would: on PostgreSQL
as a superuser (`SET LOCAL session_replication_role = replica`, triggers off for the transaction)
or as the tables' owner (`ALTER TABLE … DISABLE TRIGGER`), on SQLite by dropping the triggers.
Everything happens inside the test's transaction and is rolled back with it.
"""
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from audit.chain import chain_hash, head_message, row_document, sign
from audit.models import AuditChainHead, AuditEvent
from audit.services import record_event
from tests.factories import SYSTEM

ON_POSTGRES = connection.vendor == "postgresql"
BOTH = ("postgresql", "sqlite")
POSTGRES_ONLY = ("postgresql",)
GUARD_REFUSAL = "append-only|only moves forward"
AUDIT_TABLES = ("audit_auditevent", "audit_auditchainhead")


def sql(statement: str, params=()) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def maintenance(on: bool) -> None:
    """The retention / teardown switch for this transaction (a no-op on SQLite, which has none)."""
    if ON_POSTGRES:
        sql(f"SET LOCAL switchyard.audit_maintenance = '{'on' if on else 'off'}'")


def maintenance_off() -> None:
    # The test connection starts with maintenance 'on' (tests/conftest.py); attackers get no such pass.
    maintenance(False)


def is_superuser() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('is_superuser')")
        return cursor.fetchone()[0] == "on"


@contextmanager
def guards_bypassed(method: str = "superuser"):
    """Switch the audit triggers off as an attacker who controls the database would, then back on."""
    if not ON_POSTGRES:
        with _sqlite_triggers_dropped():
            yield
        return
    if method == "superuser" and is_superuser():
        sql("SET LOCAL session_replication_role = replica")
        yield
        sql("SET LOCAL session_replication_role = origin")
        return
    for table in AUDIT_TABLES:  # what the tables' owner (the application's own role, often) may do
        sql(f"ALTER TABLE {table} DISABLE TRIGGER USER")
    yield
    for table in AUDIT_TABLES:
        sql(f"ALTER TABLE {table} ENABLE TRIGGER USER")


@contextmanager
def _sqlite_triggers_dropped():
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name IN (%s, %s)",
                       AUDIT_TABLES)
        triggers = cursor.fetchall()
        assert triggers, "the SQLite guards are missing"
        for name, _ in triggers:
            cursor.execute(f"DROP TRIGGER {name}")
    yield
    with connection.cursor() as cursor:
        for _, statement in triggers:
            cursor.execute(statement)


def tamper(change, *, refused_on=BOTH, method: str = "superuser") -> None:
    """Apply `change()`; first assert this backend's guards refuse it when it is one they cover."""
    if connection.vendor in refused_on:
        assert_refused(change)
    with transaction.atomic():
        maintenance_off()
        with guards_bypassed(method):
            change()


def assert_refused(change, *, with_maintenance: bool = False) -> None:
    with pytest.raises(DatabaseError, match=GUARD_REFUSAL):
        with transaction.atomic():
            maintenance(with_maintenance)
            change()


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


def saved_head() -> dict:
    """The signed head as it stands: what an attacker copies before rolling the chain back."""
    return AuditChainHead.objects.filter(pk=1).values("seq", "hash", "signature").get()


def write_head(seq: int, hash_: str, signature: str | None = None) -> None:
    AuditChainHead.objects.filter(pk=1).update(seq=seq, hash=hash_,
                                               signature=signature or sign(head_message(seq, hash_)))


def roll_back_to(head: dict) -> None:
    """The rollback of issue 13: delete every row newer than a saved head and write that head back."""
    AuditEvent.objects.filter(seq__gt=head["seq"]).delete()
    write_head(head["seq"], head["hash"], head["signature"])
