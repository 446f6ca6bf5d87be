"""The database itself refuses to rewrite the trail: audit rows are append-only and the signed head only moves forward.

These guards stop mistakes and anyone without control of the database (a bug, a stray ORM call, a
role that may write but not alter tables). A superuser or the tables' owner can switch them off:
tests/audit/test_rollback.py shows that is still detected.
"""
import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from audit.chain import GENESIS_HASH, head_message, sign
from audit.models import AuditChainHead, AuditEvent
from audit.services import record_event
from tests.audit.bulk_chain import bulk_chain
from tests.audit.tampering import (
    ON_POSTGRES,
    assert_refused,
    forged,
    maintenance,
    make_chain,
    roll_back_to,
    saved_head,
    sql,
    write_head,
)
from tests.factories import SYSTEM

pytestmark = pytest.mark.django_db
postgres_only = pytest.mark.skipif(not ON_POSTGRES,
                                   reason="a PostgreSQL trigger (SQLite has no TRUNCATE, no session switch)")
# The test connection has the maintenance switch on (tests/conftest.py): every head guard must hold either way.
MAINTENANCE = pytest.mark.parametrize("with_maintenance", [False, True] if ON_POSTGRES else [False],
                                      ids=lambda on: f"maintenance-{'on' if on else 'off'}")


@pytest.mark.parametrize("statement", [
    "UPDATE audit_auditevent SET actor_label = 'x' WHERE seq = 2",
    "UPDATE audit_auditevent SET seq = 99 WHERE seq = 3",
])
@MAINTENANCE
def test_audit_rows_cannot_be_updated(statement, with_maintenance):
    make_chain(3)
    assert_refused(lambda: sql(statement), with_maintenance=with_maintenance)
    assert not AuditEvent.objects.filter(actor_label="x").exists() and AuditEvent.objects.count() == 3


@postgres_only
@pytest.mark.parametrize("statement", ["DELETE FROM audit_auditevent WHERE seq = 2", "DELETE FROM audit_auditevent",
                                       "TRUNCATE audit_auditevent"])
def test_audit_rows_cannot_be_deleted_or_truncated(statement):
    make_chain(3)
    assert_refused(lambda: sql(statement))
    assert AuditEvent.objects.count() == 3


@postgres_only
def test_orm_update_and_delete_are_refused_too():
    events = make_chain(2)
    for change in (lambda: AuditEvent.objects.filter(seq=1).update(action="x"), lambda: events[1].delete()):
        assert_refused(change)
    assert AuditEvent.objects.count() == 2


def test_appending_is_allowed():
    events = make_chain(2)
    with transaction.atomic():
        maintenance(False)
        forged(events[-1], 3, events[-1].hash).save(force_insert=True)
    assert AuditEvent.objects.count() == 3


@postgres_only
def test_retention_may_delete_old_rows_but_never_the_row_the_head_pins():
    make_chain(4)
    with transaction.atomic():
        maintenance(True)
        sql("DELETE FROM audit_auditevent WHERE seq <= 2")
    assert list(AuditEvent.objects.values_list("seq", flat=True)) == [3, 4]
    assert_refused(lambda: sql("DELETE FROM audit_auditevent WHERE seq = 4"), with_maintenance=True)
    assert_refused(lambda: sql("DELETE FROM audit_auditevent WHERE seq = 3"), with_maintenance=False)


# --- the head ---

@MAINTENANCE
def test_the_issue_13_rollback_is_refused(with_maintenance):
    """Save the signed head, append, then delete the newer rows and write the old head back."""
    make_chain(3)
    old = saved_head()
    make_chain(2)
    assert_refused(lambda: roll_back_to(old), with_maintenance=with_maintenance)
    assert_refused(lambda: write_head(old["seq"], old["hash"], old["signature"]), with_maintenance=with_maintenance)
    assert saved_head()["seq"] == 5
    call_command("audit_verify")


@MAINTENANCE
@pytest.mark.parametrize("change", ["lower-seq", "same-seq-other-hash", "re-signed", "forward-to-no-row",
                                    "forward-to-a-row-with-another-hash", "to-genesis", "other-id"])
def test_the_head_only_moves_forward(change, with_maintenance):
    events = make_chain(3)
    head = AuditChainHead.objects.get(pk=1)
    updates = {
        "lower-seq": {"seq": 2, "hash": events[1].hash, "signature": sign(head_message(2, events[1].hash))},
        "same-seq-other-hash": {"hash": "a" * 64, "signature": sign(head_message(3, "a" * 64))},
        "re-signed": {"signature": "b" * 64},
        "forward-to-no-row": {"seq": 9, "hash": "c" * 64, "signature": sign(head_message(9, "c" * 64))},
        "forward-to-a-row-with-another-hash": {"seq": 4, "hash": events[0].hash},
        "to-genesis": {"seq": 0, "hash": GENESIS_HASH, "signature": sign(head_message(0, GENESIS_HASH))},
        "other-id": {"id": 2},
    }[change]
    assert_refused(lambda: AuditChainHead.objects.filter(pk=1).update(**updates), with_maintenance=with_maintenance)
    assert AuditChainHead.objects.get(pk=1).signature == head.signature


def test_the_head_moves_forward_with_every_append_and_in_bulk():
    make_chain(2)
    bulk_chain(50)  # one UPDATE that jumps 50 rows ahead, to a row that exists
    record_event(actor=SYSTEM, action="test.event")
    assert saved_head()["seq"] == 53
    call_command("audit_verify")


def test_saving_the_head_unchanged_is_allowed():
    """Django's fixture loading (serialized_rollback) saves the head again exactly as it is."""
    make_chain(2)
    head = AuditChainHead.objects.get(pk=1)
    head.save()
    assert saved_head()["seq"] == 2


@postgres_only
@MAINTENANCE
def test_the_head_cannot_be_deleted(with_maintenance):
    make_chain(2)
    assert_refused(lambda: AuditChainHead.objects.all().delete(), with_maintenance=with_maintenance)


@postgres_only
def test_truncating_the_head_needs_the_maintenance_switch():
    make_chain(2)
    assert_refused(lambda: sql("TRUNCATE audit_auditchainhead"))
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            maintenance(True)
            sql("TRUNCATE audit_auditevent, audit_auditchainhead")  # what `flush` does
            assert not AuditChainHead.objects.exists()
            raise RuntimeError("roll the truncation back")
    assert saved_head()["seq"] == 2


@pytest.mark.parametrize("head", ["not-genesis", "genesis-over-a-chain"])
def test_a_new_head_starts_at_genesis_on_an_empty_chain(head):
    events = make_chain(2)
    values = {"not-genesis": (2, events[1].hash), "genesis-over-a-chain": (0, GENESIS_HASH)}[head]

    def recreate():
        sql("DELETE FROM audit_auditchainhead") if not ON_POSTGRES else _truncate_head_only()
        AuditChainHead.objects.create(pk=1, seq=values[0], hash=values[1], signature=sign(head_message(*values)))
    assert_refused(recreate, with_maintenance=True)
    assert saved_head()["seq"] == 2


def _truncate_head_only():
    maintenance(True)
    sql("TRUNCATE audit_auditchainhead")


def test_flush_still_resets_the_whole_trail(audit_head):
    """`manage.py flush` (and test teardown) empties both tables; post_migrate recreates the genesis head."""
    make_chain(3)
    call_command("flush", interactive=False, verbosity=0)
    assert not AuditEvent.objects.exists() and saved_head()["seq"] == 0
    record_event(actor=SYSTEM, action="test.event")
    call_command("audit_verify")


@pytest.mark.skipif(ON_POSTGRES, reason="SQLite")
def test_sqlite_guards_exist():
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        names = {row[0] for row in cursor.fetchall()}
    assert {"audit_head_moves_forward", "audit_head_starts_at_genesis", "audit_event_no_update"} <= names


# --- the least-privilege role docs/audit.md recommends ---

APP_ROLE_GRANTS = """
GRANT SELECT, INSERT ON audit_auditevent TO {role};
GRANT USAGE ON SEQUENCE audit_auditevent_id_seq TO {role};
GRANT SELECT, UPDATE ON audit_auditchainhead TO {role};
"""


@pytest.fixture
def as_app_role():
    """Run the block as a fresh role holding only the documented grants (created and dropped in the test's
    transaction)."""
    from contextlib import contextmanager

    from tests.audit.tampering import is_superuser

    if not ON_POSTGRES or not is_superuser():
        pytest.skip("needs PostgreSQL and a role that may create roles")
    role = "sy_audit_least_privilege_test"
    sql(f"CREATE ROLE {role} NOLOGIN")  # transactional: gone when the test's transaction rolls back
    sql(APP_ROLE_GRANTS.format(role=role))

    @contextmanager
    def run():
        sql(f"SET LOCAL ROLE {role}")
        try:
            yield
        finally:
            sql("RESET ROLE")
    return run


def test_the_least_privilege_role_appends_but_cannot_rewrite_or_switch_the_guards_off(as_app_role):
    make_chain(3)
    old = saved_head()
    with as_app_role():
        record_event(actor=SYSTEM, action="test.event")  # the application's one write works
        assert saved_head()["seq"] == 4
        attempts = {
            "delete-newer-rows": "DELETE FROM audit_auditevent WHERE seq > 3",
            "truncate": "TRUNCATE audit_auditevent, audit_auditchainhead",
            "update-a-row": "UPDATE audit_auditevent SET actor_label = 'x' WHERE seq = 1",
            "disable-the-triggers": "ALTER TABLE audit_auditevent DISABLE TRIGGER USER",
            "as-a-replica": "SET LOCAL session_replication_role = replica",
        }
        for statement in attempts.values():
            with pytest.raises(DatabaseError, match="permission denied|must be owner|append-only"), \
                    transaction.atomic():
                maintenance(True)
                sql(statement)
        assert_refused(lambda: write_head(old["seq"], old["hash"], old["signature"]), with_maintenance=True)
    assert saved_head()["seq"] == 4 and AuditEvent.objects.count() == 4
    call_command("audit_verify")
