"""An exported file is checked against its manifest even by someone who holds the signing key and re-signs it.

Without the key any edit breaks the manifest's signature or the file's SHA-256
(tests/audit/test_export.py). With it, the rows themselves still have to re-hash, rise in seq,
link where consecutive, and — when the manifest says the file is the whole chain — leave no gap.
"""
import hashlib
import hmac
import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from audit.chain import canonical_json, chain_hash, row_document
from audit.export import sign_manifest
from tests.audit.tampering import make_chain

pytestmark = pytest.mark.django_db


@pytest.fixture
def exported(tmp_path):
    make_chain(6)
    out = tmp_path / "trail.jsonl"
    call_command("audit_export", str(out), stdout=io.StringIO())
    return out, json.loads(Path(f"{out}.manifest.json").read_text())


def _rewrite(out: Path, manifest: dict, rows: list[dict], **changes) -> None:
    """Write `rows` as the export and re-sign a manifest that fits them, as a key holder could."""
    out.write_text("".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in rows))
    body = {**manifest, "file_sha256": hashlib.sha256(out.read_bytes()).hexdigest(), **changes}
    Path(f"{out}.manifest.json").write_text(json.dumps({**body, "signature": sign_manifest(body)}))


def _summary(rows) -> dict:
    return {"row_count": len(rows), "first_seq": rows[0]["seq"], "last_seq": rows[-1]["seq"],
            "final_chain_hash": rows[-1]["hash"]}


def _rehashed(row: dict) -> dict:
    return {**row, "hash": chain_hash(row["prev_hash"], row_document(row))}


def _without(rows, index):
    return rows[:index] + rows[index + 1:]


def _claiming_a_filter(rows) -> dict:
    """A key holder may also claim the export was filtered and not the whole chain, so that gaps are expected."""
    return {**_summary(rows), "filters": {"action": "test."}, "whole_chain": False}


# name -> (new rows from the genuine ones, the manifest re-signed to fit them (None: left as it was), expected words)
SCENARIOS = {
    "middle-row-removed": (lambda rows: _without(rows, 2), _summary, "row 3 is missing from the file"),
    "first-row-removed": (lambda rows: rows[1:], _summary, "row 1 is missing from the file"),
    "last-row-removed-count-left": (lambda rows: rows[:-1], None, "do not match the manifest's count"),
    "two-rows-swapped": (lambda rows: [rows[0], rows[2], rows[1], *rows[3:]], _summary, "row 2 is missing"),
    "two-rows-swapped-claiming-a-filter": (lambda rows: [rows[0], rows[2], rows[1], *rows[3:]], _claiming_a_filter,
                                           "row 2 in the file comes after row 3"),
    "row-repeated": (lambda rows: [*rows[:3], rows[2], *rows[3:]], _claiming_a_filter, "reordered or repeated"),
    "row-edited": (lambda rows: [*rows[:1], {**rows[1], "action": "tenant.delete"}, *rows[2:]], _summary,
                   "row 2 in the file was modified"),
    # row 3 replaced by a forged one that links to row 2 and hashes correctly: row 4 no longer links to it
    "forged-row-put-in-place": (lambda rows: [*rows[:2], _rehashed({**rows[2], "action": "tenant.delete"}), *rows[3:]],
                                _claiming_a_filter, "row 4 in the file does not link to row 3"),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_re_signed_export_is_still_caught_by_its_rows(exported, name):
    out, manifest = exported
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    change, refit, words = SCENARIOS[name]
    changed = change(rows)
    _rewrite(out, manifest, changed, **(refit(changed) if refit else {}))
    with pytest.raises(CommandError, match=words):
        call_command("audit_verify", "--export", str(out), "--manifest", f"{out}.manifest.json")


def test_a_manifest_signed_with_another_key_is_refused(exported):
    out, manifest = exported
    body = {k: v for k, v in manifest.items() if k != "signature"}
    other = hmac.new(b"another-installation-key-0123456789ab", canonical_json(body), hashlib.sha256).hexdigest()
    Path(f"{out}.manifest.json").write_text(json.dumps({**body, "signature": other}))
    with pytest.raises(CommandError, match="signature does not match"):
        call_command("audit_verify", "--export", str(out), "--manifest", f"{out}.manifest.json")


@pytest.mark.parametrize("manifest", [[], "x", {"signature": "é" * 64}, {"signature": 7}])
def test_a_manifest_that_is_not_one_is_refused_clearly(exported, manifest):
    out, _ = exported
    Path(f"{out}.manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CommandError, match="not a signed manifest"):
        call_command("audit_verify", "--export", str(out), "--manifest", f"{out}.manifest.json")


def test_a_tenant_scoped_export_is_not_taken_for_the_whole_chain(bob, alice, tmp_path):
    """Alice's unfiltered export holds only tenant A's rows, after B's: not the whole chain, and it verifies."""
    from tests.conftest import bearer

    body = b"".join(bearer(alice.key).get("/api/v1/audit/export").streaming_content)
    manifest = bearer(alice.key).get("/api/v1/audit/export/manifest").json()
    assert manifest["filters"] == {} and manifest["whole_chain"] is False
    (tmp_path / "a.jsonl").write_bytes(body)
    (tmp_path / "a.json").write_text(json.dumps(manifest))
    call_command("audit_verify", "--export", str(tmp_path / "a.jsonl"), "--manifest", str(tmp_path / "a.json"),
                 stdout=io.StringIO())
