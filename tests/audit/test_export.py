"""Exports of the audit trail: streamed, filtered, tenant-scoped, with a signed manifest that verification trusts."""
import csv
import hashlib
import io
import json
import resource
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.core.management import CommandError, call_command
from django.db.models import QuerySet
from django.http import StreamingHttpResponse

from audit.export import EXPORT_FIELDS, manifest_digest, sign_manifest
from audit.models import AuditEvent
from tests.audit.bulk_chain import bulk_chain
from tests.conftest import bearer
from tests.factories import make_key, make_member, make_user

EXPORT = "/api/v1/audit/export"


@pytest.fixture
def auditor(alice, bob):
    user = make_member(alice.tenant, "auditor", make_user("audrey"))
    return make_key(alice.tenant, user, role="auditor", scopes=("audit:read",)).raw


def _get(raw_key: str, **params):
    return bearer(raw_key).get(f"{EXPORT}?{urlencode(params)}")


def _rows(response) -> list[dict]:
    assert response.status_code == 200 and isinstance(response, StreamingHttpResponse)
    text = b"".join(response.streaming_content).decode()
    if response["Content-Type"].startswith("text/csv"):
        reader = csv.DictReader(io.StringIO(text))
        assert tuple(reader.fieldnames) == EXPORT_FIELDS
        return list(reader)
    return [json.loads(line) for line in text.splitlines()]


def _seqs(rows) -> list[int]:
    return [int(row["seq"]) for row in rows]


def _expected(**filters) -> list[int]:
    return list(AuditEvent.objects.filter(**filters).order_by("seq").values_list("seq", flat=True))


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_auditor_exports_their_tenants_trail_streamed(auditor, alice, fmt):
    response = _get(auditor, format=fmt)
    assert response.streaming and 'filename="switchyard-audit.' in response["Content-Disposition"]
    rows = _rows(response)
    assert _seqs(rows) == _expected(tenant=alice.tenant) and len(rows) >= 4
    assert {row["tenant_slug"] for row in rows} == {"tenant-a"}


def test_default_format_is_jsonl(auditor):
    assert _get(auditor)["Content-Type"] == "application/x-ndjson"


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_auditor_of_a_never_sees_b(auditor, bob, fmt):
    assert _expected(tenant=bob.tenant)  # B has events to leak
    for params in ({}, {"tenant": "tenant-b"}, {"actor": "bob"}, {"action": "tenant.create"}):
        rows = _rows(_get(auditor, format=fmt, **params))
        assert all(row["tenant_slug"] == "tenant-a" for row in rows)
        assert not set(_seqs(rows)) & set(_expected(tenant=bob.tenant))


@pytest.mark.parametrize("role,scopes", [("developer", ("admin",)), ("viewer", ("admin",)), ("admin", ("inference",))])
def test_roles_without_export_get_403(alice, role, scopes):
    user = make_member(alice.tenant, role, make_user(f"{role}-user"))
    raw = make_key(alice.tenant, user, role=role, scopes=scopes).raw
    assert _get(raw).status_code == 403
    assert bearer(raw).get(f"{EXPORT}/manifest").status_code == 403


def test_owner_and_platform_admin_can_export(alice, bob, charlie, api):
    assert _seqs(_rows(_get(alice.key))) == _expected(tenant=alice.tenant)
    api.force_login(charlie.user)
    everything = _rows(api.get(EXPORT))
    assert _seqs(everything) == _expected()
    assert _seqs(_rows(api.get(f"{EXPORT}?tenant=tenant-b"))) == _expected(tenant=bob.tenant)


def test_filters_by_action_actor_and_time(auditor, alice):
    client_rows = lambda **p: _seqs(_rows(_get(alice.key, **p)))  # noqa: E731
    assert client_rows(action="api_key.create") == _expected(tenant=alice.tenant, action="api_key.create")
    assert client_rows(action="quota.") == _expected(tenant=alice.tenant, action__startswith="quota.")
    assert client_rows(actor="tests") == _expected(tenant=alice.tenant, actor_label="tests")
    events = list(AuditEvent.objects.filter(tenant=alice.tenant).order_by("seq"))
    middle = events[len(events) // 2].occurred_at
    since = middle.isoformat().replace("+00:00", "Z")
    assert client_rows(since=since) == _expected(tenant=alice.tenant, occurred_at__gte=middle)
    assert client_rows(until=since) == _expected(tenant=alice.tenant, occurred_at__lt=middle)
    assert client_rows(since=since, until=(middle + timedelta(microseconds=1)).isoformat()) == \
        _expected(tenant=alice.tenant, occurred_at=middle)
    assert client_rows(action="nothing.like.this") == []


@pytest.mark.parametrize("params,field", [({"format": "xml"}, "format"), ({"since": "yesterday"}, "since"),
                                          ({"until": "2026-01-01T00:00:00"}, "until")])
def test_bad_parameters_are_400_naming_the_field(auditor, params, field):
    response = _get(auditor, **params)
    assert response.status_code == 400 and field in response.json()


def test_api_manifest_matches_the_streamed_file(alice, tmp_path):
    body = b"".join(_get(alice.key, format="csv").streaming_content)
    manifest = bearer(alice.key).get(f"{EXPORT}/manifest?format=csv").json()
    assert manifest["file_sha256"] == hashlib.sha256(body).hexdigest()
    assert manifest["row_count"] == len(_expected(tenant=alice.tenant))
    (tmp_path / "a.csv").write_bytes(body)
    (tmp_path / "a.json").write_text(json.dumps(manifest))
    call_command("audit_verify", "--export", str(tmp_path / "a.csv"), "--manifest", str(tmp_path / "a.json"))


def _export(tmp_path: Path, fmt: str, *args) -> tuple[Path, dict]:
    out = tmp_path / f"trail.{fmt}"
    call_command("audit_export", str(out), "--format", fmt, *args, stdout=io.StringIO())
    return out, json.loads(Path(f"{out}.manifest.json").read_text())


def _verify(out: Path, manifest_path: Path | None = None) -> None:
    call_command("audit_verify", "--export", str(out), "--manifest", str(manifest_path or f"{out}.manifest.json"),
                 stdout=io.StringIO())


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_command_writes_file_and_signed_manifest_that_verify(alice, bob, tmp_path, fmt):
    out, manifest = _export(tmp_path, fmt)
    *events, issue = AuditEvent.objects.order_by("seq")  # issuing the manifest is the newest event
    assert issue.action == "audit.manifest_issue" and issue.after["manifest_sha256"] == manifest_digest(manifest)
    assert manifest["row_count"] == len(events) and manifest["format"] == fmt
    assert (manifest["first_seq"], manifest["last_seq"]) == (events[0].seq, events[-1].seq)
    assert manifest["final_chain_hash"] == events[-1].hash
    assert manifest["file_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert manifest["signature"] == sign_manifest(manifest)
    _verify(out)


def test_filtered_command_export_verifies(alice, bob, tmp_path):
    out, manifest = _export(tmp_path, "jsonl", "--tenant", "tenant-b")
    assert manifest["row_count"] == len(_expected(tenant=bob.tenant)) and manifest["filters"] == {"tenant": "tenant-b"}
    _verify(out)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize("where", [0.0, 0.5, 0.999])
def test_one_edited_byte_of_the_file_fails_verification(alice, tmp_path, fmt, where):
    out, _ = _export(tmp_path, fmt)
    data = bytearray(out.read_bytes())
    position = int(len(data) * where)
    data[position] = ord("x") if data[position] != ord("x") else ord("y")
    out.write_bytes(bytes(data))
    with pytest.raises(CommandError, match="SHA-256"):
        _verify(out)


@pytest.mark.parametrize("field,value", [("row_count", 1), ("final_chain_hash", "0" * 64), ("last_seq", 999),
                                         ("file_sha256", "f" * 64)])
def test_edited_manifest_fails_verification(alice, tmp_path, field, value):
    out, manifest = _export(tmp_path, "jsonl")
    Path(f"{out}.manifest.json").write_text(json.dumps({**manifest, field: value}))
    with pytest.raises(CommandError, match="signature"):
        _verify(out)


def test_edited_row_with_a_re_signed_manifest_is_still_caught_by_the_row_hashes(alice, tmp_path):
    out, manifest = _export(tmp_path, "jsonl")
    lines = out.read_text().splitlines(keepends=True)
    row = json.loads(lines[2])
    lines[2] = json.dumps({**row, "actor_label": "someone else"}, sort_keys=True, separators=(",", ":")) + "\n"
    out.write_text("".join(lines))
    body = {**manifest, "file_sha256": hashlib.sha256(out.read_bytes()).hexdigest()}
    Path(f"{out}.manifest.json").write_text(json.dumps({**body, "signature": sign_manifest(body)}))
    with pytest.raises(CommandError, match=f"first bad seq: {row['seq']};"):
        _verify(out)


BIG = 100_000


def _peak_rss_growth(run) -> int:
    """How far `run` pushes the process's peak resident memory above its earlier peak, in bytes."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024  # Linux reports KiB


def _feed(digest, chunks, limit: int) -> bytes:
    """Hash the first `limit` bytes of the stream; return what follows them (kept: it is small)."""
    seen, rest = 0, []
    for chunk in chunks:
        digest.update(chunk[:max(0, limit - seen)])
        rest.append(chunk[max(0, limit - seen):])
        seen += len(chunk)
    return b"".join(rest)


@pytest.mark.slow
def test_100k_events_export_in_bounded_memory(charlie, api, tmp_path, monkeypatch):
    api.force_login(charlie.user)  # before exporting: signing in is itself an audited event
    bulk_chain(BIG)
    iterations = []
    real_iterator = QuerySet.iterator
    monkeypatch.setattr(QuerySet, "iterator", lambda qs, *a, **kw: iterations.append(kw) or real_iterator(qs, *a, **kw))
    out = tmp_path / "big.jsonl"
    growth = _peak_rss_growth(lambda: call_command("audit_export", str(out), stdout=io.StringIO()))
    size = out.stat().st_size
    assert size > 30_000_000 and growth < size / 3, (growth, size)  # 100k model instances would dwarf the file
    assert iterations and all(kw.get("chunk_size") for kw in iterations)  # rows come from a chunked cursor
    manifest = json.loads(Path(f"{out}.manifest.json").read_text())
    assert manifest["row_count"] == AuditEvent.objects.count() - 1 and manifest["row_count"] > BIG  # + its issue
    _verify(out)
    response = api.get(EXPORT)
    assert isinstance(response, StreamingHttpResponse)
    digest, rest = hashlib.sha256(), []
    growth = _peak_rss_growth(lambda: rest.append(_feed(digest, response.streaming_content, size)))
    assert digest.hexdigest() == manifest["file_sha256"] and growth < size / 3, growth
    assert json.loads(rest[0])["action"] == "audit.manifest_issue"  # the one row newer than the command's file
