"""Any change to stored audit rows or to the signed head makes `audit_verify` fail, naming the first row that does
not hold.

Each scenario is first refused by the database's guards where this backend has them, then done
anyway with the guards off (as a database superuser, or with the SQLite file in hand).
"""
import hashlib
import hmac
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command

from audit.chain import GENESIS_HASH, head_message
from audit.models import AuditChainHead, AuditEvent
from tests.audit.tampering import BOTH, POSTGRES_ONLY, forged, make_chain, rehash_from, sql, tamper, write_head

pytestmark = pytest.mark.django_db


@pytest.fixture
def chain():
    events = make_chain(6)
    assert [e.seq for e in events] == [1, 2, 3, 4, 5, 6] and events[0].prev_hash == GENESIS_HASH
    return events


def _broken_at(seq: int, reason: str = "") -> str:
    with pytest.raises(CommandError) as error:
        call_command("audit_verify")
    message = str(error.value)
    assert f"first bad seq: {seq};" in message, message
    assert reason in message, message
    return message


def test_untampered_chain_verifies(chain, capsys):
    call_command("audit_verify")
    assert "audit chain OK: 6 rows verified" in capsys.readouterr().out


def test_empty_chain_verifies(capsys):
    call_command("audit_verify")
    assert "audit chain OK: 0 rows verified" in capsys.readouterr().out


# Every field the row hash covers, and the two hashes themselves: a new value for row 3.
FIELD_EDITS = {
    "occurred_at": lambda row: row.occurred_at - timedelta(days=1),
    "actor_id": lambda row: 4242,
    "actor_label": lambda row: "someone else",
    "actor_type": lambda row: "user",
    "tenant_id": lambda row: 4242,
    "tenant_slug": lambda row: "other-tenant",
    "action": lambda row: "tenant.create",
    "target_type": lambda row: "tenants.tenant",
    "target_id": lambda row: "99",
    "before": lambda row: {"injected": True},
    "after": lambda row: {"n": 99},
    "request_id": lambda row: "req-forged",
    "source_ip": lambda row: "203.0.113.9",
    "prev_hash": lambda row: "f" * 64,
    "hash": lambda row: "e" * 64,
}


@pytest.mark.parametrize("field", sorted(FIELD_EDITS))
def test_each_hashed_field_modified(chain, field):
    value = FIELD_EDITS[field](chain[2])
    tamper(lambda: AuditEvent.objects.filter(seq=3).update(**{field: value}))
    _broken_at(3, "does not link" if field == "prev_hash" else "modified")


def _swap(a: int, b: int) -> None:
    sql("UPDATE audit_auditevent SET seq = %s WHERE seq = %s", [-1, a])
    sql("UPDATE audit_auditevent SET seq = %s WHERE seq = %s", [a, b])
    sql("UPDATE audit_auditevent SET seq = %s WHERE seq = %s", [b, -1])


def _insert_at_4(chain):
    sql("UPDATE audit_auditevent SET seq = seq + 1000 WHERE seq >= %s", [4])
    sql("UPDATE audit_auditevent SET seq = seq - 999 WHERE seq >= %s", [1000])
    forged(chain[2], 4, chain[2].hash).save(force_insert=True)


def _rewrite_row_3_and_rehash():
    AuditEvent.objects.filter(seq=3).update(after={"n": 99})
    rehash_from(3)


def _rewrite_and_move_head(signature_for):
    """Rewrite row 3, recompute every later hash, and point the head at the new last row."""
    _rewrite_row_3_and_rehash()
    last = AuditEvent.objects.get(seq=6)
    write_head(6, last.hash, signature_for(last))


def _sign_with_another_key(message: str) -> str:
    return hmac.new(b"not-the-installation-key-0123456789abcdef", message.encode(), hashlib.sha256).hexdigest()


# name -> (the tampering, where the guards refuse it, expected first bad seq, words of the reason)
SCENARIOS = {
    "seq-renumbered": (lambda c: sql("UPDATE audit_auditevent SET seq = 30 WHERE seq = 3"), BOTH, 3, "missing"),
    "first-row-deleted": (lambda c: sql("DELETE FROM audit_auditevent WHERE seq = 1"), POSTGRES_ONLY, 1, "missing"),
    "middle-row-deleted": (lambda c: sql("DELETE FROM audit_auditevent WHERE seq = 3"), POSTGRES_ONLY, 3, "missing"),
    "last-row-deleted": (lambda c: sql("DELETE FROM audit_auditevent WHERE seq = 6"), POSTGRES_ONLY, 6, "deleted"),
    "tail-deleted": (lambda c: sql("DELETE FROM audit_auditevent WHERE seq >= 4"), POSTGRES_ONLY, 4, "rows 4..6"),
    "every-row-deleted": (lambda c: sql("DELETE FROM audit_auditevent"), POSTGRES_ONLY, 1, "rows 1..6 were deleted"),
    "forged-row-appended": (lambda c: forged(c[-1], 7, c[-1].hash).save(force_insert=True), (), 7,
                            "added outside the audit service"),
    # the forged row 4 is self-consistent; the old row 4, now 5, no longer links
    "forged-row-inserted-in-the-middle": (_insert_at_4, BOTH, 5, "does not link"),
    "two-rows-swapped": (lambda c: _swap(3, 4), BOTH, 3, "does not link"),
    "rows-reordered": (lambda c: (_swap(2, 5), _swap(3, 4)), BOTH, 2, "does not link"),
    "row-rewritten-with-every-later-hash-recomputed": (lambda c: _rewrite_row_3_and_rehash(), BOTH, 6,
                                                       "signed chain head"),
    "head-moved-to-a-forged-tail-without-the-key": (
        lambda c: _rewrite_and_move_head(lambda last: AuditChainHead.objects.get(pk=1).signature), BOTH, 7,
        "signature"),
    "head-re-signed-with-a-wrong-key": (
        lambda c: _rewrite_and_move_head(lambda last: _sign_with_another_key(head_message(6, last.hash))), BOTH, 7,
        "signature"),
    "head-deleted": (lambda c: AuditChainHead.objects.all().delete(), POSTGRES_ONLY, 7, "head is missing"),
    # a genuine older head, its genuine signature, and the newer rows left in place
    "head-set-back-over-rows-kept": (lambda c: write_head(4, c[3].hash), BOTH, 5, "added outside the audit service"),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_tampering_is_detected(chain, name):
    change, refused_on, first_bad_seq, reason = SCENARIOS[name]
    tamper(lambda: change(chain), refused_on=refused_on)
    _broken_at(first_bad_seq, reason)
