"""Each signed manifest names the previous one and the chain head, and its issue is recorded in the chain."""
import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from audit.chain import head_message, sign
from audit.export import MANIFEST_ISSUE, manifest_digest
from audit.models import AuditChainHead, AuditEvent
from tests.audit.tampering import forged, make_chain, saved_head, tamper, write_head
from tests.conftest import bearer

pytestmark = pytest.mark.django_db


def _issue(tmp_path: Path, name: str, *args) -> dict:
    out = tmp_path / name
    call_command("audit_export", str(out), *args, stdout=io.StringIO())
    return json.loads(Path(f"{out}.manifest.json").read_text())


def _issue_events() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=MANIFEST_ISSUE).order_by("seq"))


def test_each_manifest_names_the_previous_one_and_the_head_it_saw(tmp_path):
    make_chain(3)
    first = _issue(tmp_path, "a.jsonl")
    make_chain(2)
    second = _issue(tmp_path, "b.jsonl", "--action", "test.")
    assert (first["manifest_seq"], first["previous_manifest_sha256"]) == (1, None)
    assert (second["manifest_seq"], second["previous_manifest_sha256"]) == (2, manifest_digest(first))
    assert (first["chain_head_seq"], first["chain_head_hash"]) == (3, AuditEvent.objects.get(seq=3).hash)
    assert second["chain_head_seq"] == 6  # rows 1..3, the first issue (4), rows 5..6
    issues = _issue_events()
    assert [e.seq for e in issues] == [4, 7] and [e.actor_label for e in issues] == ["manage.py audit_export"] * 2
    assert [e.after["manifest_sha256"] for e in issues] == [manifest_digest(first), manifest_digest(second)]
    assert issues[1].after["filters"] == {"action": "test."} and issues[1].after["previous_manifest_sha256"] == \
        manifest_digest(first)
    call_command("audit_verify", "--since-manifest", str(tmp_path / "a.jsonl.manifest.json"),
                 "--since-manifest", str(tmp_path / "b.jsonl.manifest.json"), stdout=io.StringIO())


def test_the_api_and_the_console_issue_chained_manifests_recorded_under_their_caller(alice, charlie, client):
    from django.urls import reverse

    first = bearer(alice.key).get("/api/v1/audit/export/manifest").json()
    client.force_login(charlie.user)
    second = json.loads(client.get(reverse("console:audit-manifest") + "?format=csv").content)
    assert second["previous_manifest_sha256"] == manifest_digest(first) and second["manifest_seq"] == 2
    issues = _issue_events()
    assert [e.actor_label.split(" ")[0] for e in issues][0].startswith("sy_") and issues[1].actor_label == "charlie"
    assert [e.tenant_id for e in issues] == [None, None]  # other tenants' auditors never see who exported
    call_command("audit_verify", stdout=io.StringIO())


def test_a_filtered_manifest_anchors_the_whole_chain(tmp_path, alice, bob):
    manifest = _issue(tmp_path, "a.jsonl", "--tenant", "tenant-a")
    assert manifest["last_seq"] < manifest["chain_head_seq"] == saved_head()["seq"] - 1
    path = str(tmp_path / "a.jsonl.manifest.json")
    call_command("audit_verify", "--since-manifest", path, stdout=io.StringIO())
    tamper(lambda: _roll_back(manifest["chain_head_seq"] - 1))
    with pytest.raises(CommandError, match="rolled back"):
        call_command("audit_verify", "--since-manifest", path)


def _roll_back(seq: int) -> None:
    AuditEvent.objects.filter(seq__gt=seq).delete()
    write_head(seq, AuditEvent.objects.get(seq=seq).hash)


def test_a_forged_issue_record_breaks_the_record_of_manifests_even_with_the_key(tmp_path):
    """Someone holding the signing key appends a manifest issue that skips one: the walk still sees it."""
    make_chain(2)
    _issue(tmp_path, "a.jsonl")
    last = AuditEvent.objects.get(seq=3)

    def append_forged_issue():
        event = forged(last, 4, last.hash)
        event.action, event.after = MANIFEST_ISSUE, {"manifest_seq": 5, "previous_manifest_sha256": "9" * 64,
                                                     "chain_head_seq": 3, "chain_head_hash": last.hash}
        from audit.chain import chain_hash, row_document

        event.hash = chain_hash(event.prev_hash, row_document(event))
        event.save(force_insert=True)
        write_head(4, event.hash)  # signed with the real key
    tamper(append_forged_issue, refused_on=())
    with pytest.raises(CommandError,
                       match="first bad seq: 4; row 4 records a manifest that does not follow manifest #1"):
        call_command("audit_verify")


def test_a_manifest_from_before_chaining_is_still_checked_to_its_last_row(tmp_path):
    """Manifests issued before this change carry no head: --since-manifest checks their last row."""
    from audit.export import sign_manifest

    make_chain(4)
    row = AuditEvent.objects.get(seq=4)
    body = {"format": "jsonl", "filters": {}, "row_count": 4, "first_seq": 1, "last_seq": 4,
            "final_chain_hash": row.hash, "file_sha256": "0" * 64, "generated_at": "2026-11-30T00:00:00.000000Z"}
    (tmp_path / "old.json").write_text(json.dumps({**body, "signature": sign_manifest(body)}))
    call_command("audit_verify", "--since-manifest", str(tmp_path / "old.json"), stdout=io.StringIO())
    tamper(lambda: _roll_back(3))
    with pytest.raises(CommandError, match="first bad seq: 4; the database was rolled back: the manifest saw row 4"):
        call_command("audit_verify", "--since-manifest", str(tmp_path / "old.json"))


def test_since_manifest_refuses_an_unreadable_file_clearly(tmp_path):
    (tmp_path / "m.json").write_text("{not json")
    with pytest.raises(CommandError, match="cannot read manifest"):
        call_command("audit_verify", "--since-manifest", str(tmp_path / "m.json"))
    with pytest.raises(CommandError, match="go together"):
        call_command("audit_verify", "--export", str(tmp_path / "m.json"))


def test_a_head_signed_for_another_seq_is_not_a_witness_line(tmp_path):
    make_chain(2)
    head = AuditChainHead.objects.get(pk=1)
    line = {"seq": 1, "hash": head.hash, "signature": sign(head_message(2, head.hash))}
    (tmp_path / "w.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(CommandError, match="line 1 has a signature that does not match"):
        call_command("audit_verify", "--witness", str(tmp_path / "w.jsonl"))
