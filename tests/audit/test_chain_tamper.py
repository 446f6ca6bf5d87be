"""Any change to stored audit rows makes `audit_verify` fail, naming the first row that does not hold."""
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command

from audit.chain import GENESIS_HASH
from audit.models import AuditChainHead, AuditEvent
from tests.audit.tampering import forged, make_chain, rehash_from, sql, tamper

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
    assert reason in message
    return message


def test_untampered_chain_verifies(chain, capsys):
    call_command("audit_verify")
    assert "audit chain OK: 6 rows verified" in capsys.readouterr().out


def test_empty_chain_verifies(capsys):
    call_command("audit_verify")
    assert "audit chain OK: 0 rows verified" in capsys.readouterr().out


def test_modified_after(chain):
    tamper(lambda: AuditEvent.objects.filter(seq=3).update(after={"n": 99}))
    _broken_at(3, "modified")


def test_modified_actor_label(chain):
    tamper(lambda: sql("UPDATE audit_auditevent SET actor_label = %s WHERE seq = %s", ["someone else", 4]))
    _broken_at(4, "modified")


def test_modified_occurred_at(chain):
    tamper(lambda: AuditEvent.objects.filter(seq=2).update(occurred_at=chain[1].occurred_at - timedelta(days=1)))
    _broken_at(2, "modified")


def test_deleted_middle_row(chain):
    tamper(lambda: sql("DELETE FROM audit_auditevent WHERE seq = %s", [3]))
    _broken_at(3, "missing")


def test_deleted_last_row(chain):
    tamper(lambda: sql("DELETE FROM audit_auditevent WHERE seq = %s", [6]))
    _broken_at(6, "deleted")


def test_forged_row_appended_with_a_correct_hash(chain):
    tamper(lambda: forged(chain[-1], 7, chain[-1].hash).save(force_insert=True), blocked=False)
    _broken_at(7, "added outside the audit service")


def test_forged_row_inserted_in_the_middle_with_renumbered_seqs(chain):
    def insert_at_4():
        sql("UPDATE audit_auditevent SET seq = seq + 1000 WHERE seq >= %s", [4])
        sql("UPDATE audit_auditevent SET seq = seq - 999 WHERE seq >= %s", [1000])
        forged(chain[2], 4, chain[2].hash).save(force_insert=True)
    tamper(insert_at_4)
    assert list(AuditEvent.objects.values_list("seq", flat=True)) == [1, 2, 3, 4, 5, 6, 7]
    _broken_at(5, "does not link")  # the forged row 4 is self-consistent; the old row 4, now 5, no longer links


def test_two_rows_swapped(chain):
    def swap():
        sql("UPDATE audit_auditevent SET seq = %s WHERE seq = %s", [-1, 3])
        sql("UPDATE audit_auditevent SET seq = %s WHERE seq = %s", [3, 4])
        sql("UPDATE audit_auditevent SET seq = %s WHERE seq = %s", [4, -1])
    tamper(swap)
    _broken_at(3)


def test_modified_row_with_every_later_hash_recomputed_is_caught_by_the_signed_head(chain):
    def rewrite():
        AuditEvent.objects.filter(seq=3).update(after={"n": 99})
        rehash_from(3)
    tamper(rewrite)
    _broken_at(6, "signed chain head")


def test_forged_head_without_the_signing_key(chain):
    def rewrite():
        AuditEvent.objects.filter(seq=3).update(after={"n": 99})
        rehash_from(3)
    tamper(rewrite)
    last = AuditEvent.objects.get(seq=6)
    AuditChainHead.objects.filter(pk=1).update(hash=last.hash)
    _broken_at(7, "signature")
