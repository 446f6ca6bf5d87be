"""A chain rolled back to an earlier head is caught by what was seen outside the database.

The trail: 6 events, the signed head saved, 4 more events, an export whose manifest names head 10
(its issue is row 11), and a witness file that saw every head. Then the database is rolled back
in each way someone in full control of it could, and every check that holds an anchor must say so.
"""
import io
import json
import logging
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from audit.chain import GENESIS_HASH
from audit.models import AuditChainHead, AuditEvent
from audit.tasks import verify_chain_task
from audit.verify import verify_trail
from tests.audit.tampering import (
    ON_POSTGRES,
    maintenance,
    make_chain,
    roll_back_to,
    saved_head,
    sql,
    tamper,
    write_head,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def witness_path(tmp_path, settings) -> Path:
    settings.SWITCHYARD_AUDIT_WITNESS_FILE = str(tmp_path / "witness.jsonl")
    return tmp_path / "witness.jsonl"


@pytest.fixture
def trail(committed, witness_path, tmp_path):
    committed(lambda: make_chain(6))
    at_6 = saved_head()
    committed(lambda: make_chain(4))
    at_10 = saved_head()
    out = tmp_path / "trail.jsonl"
    committed(lambda: call_command("audit_export", str(out), stdout=io.StringIO()))
    manifest = Path(f"{out}.manifest.json")
    assert json.loads(manifest.read_text())["chain_head_seq"] == 10 and saved_head()["seq"] == 11
    assert len(witness_path.read_text().splitlines()) == 11
    call_command("audit_verify", "--since-manifest", str(manifest), stdout=io.StringIO())
    return {"at_6": at_6, "at_10": at_10, "manifest": manifest, "witness": witness_path, "committed": committed}


def _replay_through_the_maintenance_pass(head: dict) -> None:
    """No trigger switched off: empty both tables (as flush does), then put back rows 1..6 and their head."""
    rows = list(AuditEvent.objects.filter(seq__lte=head["seq"]).order_by("seq").values())
    if ON_POSTGRES:
        maintenance(True)
        sql("TRUNCATE audit_auditevent, audit_auditchainhead")
    else:
        sql("DELETE FROM audit_auditevent")
        sql("DELETE FROM audit_auditchainhead")
    AuditChainHead.objects.create(pk=1, seq=0, hash=GENESIS_HASH, signature=_genesis_signature())
    AuditEvent.objects.bulk_create([AuditEvent(**row) for row in rows])
    write_head(head["seq"], head["hash"], head["signature"])


def _genesis_signature() -> str:
    from audit.chain import head_message, sign

    return sign(head_message(0, GENESIS_HASH))


def _rewrite_after_rollback(trail) -> None:
    tamper(lambda: roll_back_to(trail["at_6"]))
    trail["committed"](lambda: make_chain(6))  # the application carries on: rows 7..12 are new ones


# name -> (the rollback, (manifest: first bad seq, words), (witness: first bad seq, words))
ROLLBACKS = {
    "issue-13-rollback": (lambda t: tamper(lambda: roll_back_to(t["at_6"])), (7, "rolled back"), (7, "rolled back")),
    "issue-13-rollback-as-table-owner": (lambda t: tamper(lambda: roll_back_to(t["at_6"]), method="owner"),
                                         (7, "rolled back"), (7, "rolled back")),
    "rollback-then-new-rows": (_rewrite_after_rollback, (10, "diverged"), (7, "diverged")),
    "reset-to-an-empty-chain": (lambda t: tamper(lambda: roll_back_to({"seq": 0, "hash": GENESIS_HASH,
                                                                       "signature": _genesis_signature()})),
                                (1, "rolled back"), (1, "rolled back")),
    "export-hidden-by-rolling-back-its-issue": (lambda t: tamper(lambda: roll_back_to(t["at_10"])),
                                                (11, "was recorded as row 11"), (11, "rolled back")),
    "replayed-through-the-maintenance-pass": (lambda t: _replay_through_the_maintenance_pass(t["at_6"]),
                                              (7, "rolled back"), (7, "rolled back")),
}


def _broken(*args) -> str:
    with pytest.raises(CommandError) as error:
        call_command("audit_verify", *args, stdout=io.StringIO())
    return str(error.value)


@pytest.mark.parametrize("name", list(ROLLBACKS))
def test_rollback_is_caught_by_the_manifest_and_by_the_witness(trail, name, settings):
    rollback, (manifest_seq, manifest_words), (witness_seq, witness_words) = ROLLBACKS[name]
    if name.endswith("as-table-owner") and not ON_POSTGRES:
        pytest.skip("ALTER TABLE … DISABLE TRIGGER is PostgreSQL's")
    rollback(trail)
    settings.SWITCHYARD_AUDIT_WITNESS_FILE = ""
    message = _broken("--since-manifest", str(trail["manifest"]))
    assert f"first bad seq: {manifest_seq};" in message and manifest_words in message, message
    message = _broken("--witness", str(trail["witness"]))
    assert f"first bad seq: {witness_seq};" in message and witness_words in message, message
    settings.SWITCHYARD_AUDIT_WITNESS_FILE = str(trail["witness"])
    assert witness_words in _broken()  # the configured witness is checked by a plain `audit_verify`


def test_without_any_anchor_a_clean_rollback_looks_like_the_older_chain(trail, settings):
    """What docs/audit.md says: the database alone cannot tell; manifests and witnesses can."""
    tamper(lambda: roll_back_to(trail["at_6"]))
    settings.SWITCHYARD_AUDIT_WITNESS_FILE = ""
    assert verify_trail().ok and verify_trail().head_seq == 6


def test_an_untouched_trail_agrees_with_every_anchor(trail, capsys):
    call_command("audit_verify", "--since-manifest", str(trail["manifest"]), "--witness", str(trail["witness"]))
    assert "audit chain OK: 11 rows verified; 13 anchors outside the database agree" in capsys.readouterr().out


def test_the_rest_endpoint_reports_the_rollback(trail, charlie, api):
    api.force_login(charlie.user)
    assert api.get("/api/v1/audit/verify").json()["ok"] is True
    tamper(lambda: roll_back_to(trail["at_6"]))
    body = api.get("/api/v1/audit/verify").json()
    assert body["ok"] is False and body["first_bad_seq"] == 7 and "rolled back" in body["reason"]


def test_the_rest_endpoint_checks_a_posted_manifest(trail, charlie, api, settings):
    api.force_login(charlie.user)
    settings.SWITCHYARD_AUDIT_WITNESS_FILE = ""
    manifest = json.loads(trail["manifest"].read_text())
    assert api.post("/api/v1/audit/verify", {"since_manifest": manifest}, format="json").json()["ok"] is True
    tamper(lambda: roll_back_to(trail["at_6"]))
    body = api.post("/api/v1/audit/verify", {"since_manifest": manifest}, format="json").json()
    assert body["ok"] is False and "rolled back" in body["reason"] and body["first_bad_seq"] == 7
    edited = api.post("/api/v1/audit/verify", {"since_manifest": {**manifest, "chain_head_seq": 3}}, format="json")
    assert edited.status_code == 200 and "signature" in edited.json()["reason"]


@pytest.mark.parametrize("body", [{}, {"since_manifest": "x"}, {"since_manifest": [1]}, {"since_manifest": None}])
def test_the_rest_endpoint_rejects_a_malformed_request_with_400(charlie, api, body):
    api.force_login(charlie.user)
    response = api.post("/api/v1/audit/verify", body, format="json")
    assert response.status_code == 400 and "since_manifest" in response.json()


@pytest.mark.parametrize("manifest", [{"signature": "a" * 64, "note": "\ud800"}, {"signature": "é" * 64},
                                      {"signature": "a" * 64, "chain_head_seq": 2 ** 70}])
def test_the_rest_endpoint_answers_a_strange_manifest_with_a_verdict_not_a_500(charlie, api, manifest):
    api.force_login(charlie.user)
    response = api.post("/api/v1/audit/verify", data=json.dumps({"since_manifest": manifest}),
                        content_type="application/json")
    assert response.status_code == 200 and response.json()["ok"] is False
    assert "not a signed manifest" in response.json()["reason"] or "signature" in response.json()["reason"]


def test_a_witness_line_naming_an_impossible_row_is_refused_not_looked_up(tmp_path):
    from audit.chain import head_message, sign

    huge = 2 ** 70
    (tmp_path / "w.jsonl").write_text(json.dumps({"seq": huge, "hash": "a" * 64,
                                                  "signature": sign(head_message(huge, "a" * 64))}) + "\n")
    assert "line 1 is not a signed chain head" in _broken("--witness", str(tmp_path / "w.jsonl"))


def test_only_platform_admins_may_verify(alice):
    from tests.conftest import bearer

    assert bearer(alice.key).get("/api/v1/audit/verify").status_code == 403
    assert bearer(alice.key).post("/api/v1/audit/verify", {"since_manifest": {}}, format="json").status_code == 403


def test_the_console_verify_page_reports_the_rollback(trail, charlie, client, settings):
    client.force_login(charlie.user)
    url = reverse("console:audit-verify")
    assert "The audit chain is intact" in client.get(url).content.decode()
    tamper(lambda: roll_back_to(trail["at_6"]))
    html = client.get(url).content.decode()
    assert "The audit chain is broken" in html and "rolled back" in html
    settings.SWITCHYARD_AUDIT_WITNESS_FILE = ""
    assert "The audit chain is intact" in client.get(url).content.decode()  # the database alone cannot tell
    with trail["manifest"].open("rb") as upload:
        html = client.post(url, {"manifest": upload}).content.decode()
    assert "The audit chain is broken" in html and "rolled back" in html and "uploaded manifest #1" in html


def test_the_console_says_when_an_upload_is_not_a_manifest(charlie, client, tmp_path):
    client.force_login(charlie.user)
    (tmp_path / "x.json").write_text("[1, 2]")
    with (tmp_path / "x.json").open("rb") as upload:
        html = client.post(reverse("console:audit-verify"), {"manifest": upload}).content.decode()
    assert "not a JSON manifest" in html


def test_the_hourly_task_checks_the_witness_and_logs_an_error(trail, caplog):
    assert verify_chain_task()["ok"] is True
    tamper(lambda: roll_back_to(trail["at_6"]))
    with caplog.at_level(logging.ERROR, logger="audit.tasks"):
        result = verify_chain_task()
    assert result["ok"] is False and result["first_bad_seq"] == 7
    assert any("rolled back" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("edit", ["chain_head_seq", "chain_head_hash", "previous_manifest_sha256", "signature"])
def test_an_edited_manifest_is_refused_not_trusted(trail, edit):
    manifest = json.loads(trail["manifest"].read_text())
    manifest[edit] = 3 if edit == "chain_head_seq" else "0" * 64
    trail["manifest"].write_text(json.dumps(manifest))
    assert "manifest's signature does not match" in _broken("--since-manifest", str(trail["manifest"]))


def test_a_forged_witness_line_is_reported_with_its_line_number(trail):
    lines = trail["witness"].read_text().splitlines()
    entry = json.loads(lines[3])
    lines[3] = json.dumps({**entry, "seq": 40})
    trail["witness"].write_text("\n".join(lines) + "\n")
    assert "line 4 has a signature that does not match" in _broken("--witness", str(trail["witness"]))

