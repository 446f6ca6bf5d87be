"""Checking the audit chain (in the database, or in an exported file against its manifest)."""
import csv
import hashlib
import hmac
import json
from dataclasses import dataclass

from audit.chain import GENESIS_HASH, chain_hash, head_message, row_document, sign
from audit.export import JSON_COLUMNS, sign_manifest
from audit.models import AuditChainHead, AuditEvent


@dataclass(frozen=True)
class Verdict:
    """Outcome of a verification: `first_bad_seq` names the first row that does not hold."""

    ok: bool
    checked: int
    first_bad_seq: int | None = None
    reason: str = ""


def verify_chain() -> Verdict:
    """Walk every row in seq order; any modified, deleted, inserted or reordered row breaks it."""
    expected_seq, prev_hash, checked = 1, GENESIS_HASH, 0
    for event in AuditEvent.objects.order_by("seq").iterator(chunk_size=2000):
        problem = _row_problem(event, expected_seq, prev_hash)
        if problem:
            return Verdict(False, checked, *problem)
        expected_seq, prev_hash, checked = event.seq + 1, event.hash, checked + 1
    return _check_head(expected_seq - 1, prev_hash, checked)


def _row_problem(event, expected_seq: int, prev_hash: str):
    if event.seq != expected_seq:
        return expected_seq, f"row {expected_seq} is missing (next row found is {event.seq})"
    if event.prev_hash != prev_hash:
        return event.seq, f"row {event.seq} does not link to row {expected_seq - 1}"
    if chain_hash(event.prev_hash, row_document(event)) != event.hash:
        return event.seq, f"row {event.seq} was modified after it was written"
    return None


def _check_head(last_seq: int, last_hash: str, checked: int) -> Verdict:
    """The signed head pins the newest row, so a deleted or forged tail is caught too."""
    head = AuditChainHead.objects.filter(pk=1).first()
    if head is None:
        return Verdict(False, checked, last_seq + 1, "the chain head is missing")
    if not hmac.compare_digest(head.signature, sign(head_message(head.seq, head.hash))):
        return Verdict(False, checked, last_seq + 1, "the chain head's signature does not match")
    if head.seq > last_seq:
        return Verdict(False, checked, last_seq + 1, f"rows {last_seq + 1}..{head.seq} were deleted")
    if head.seq < last_seq:
        return Verdict(False, checked, head.seq + 1, f"rows after {head.seq} were added outside the audit service")
    if head.hash != last_hash:
        return Verdict(False, checked, last_seq, f"row {last_seq} does not match the signed chain head")
    return Verdict(True, checked)


def verify_export(export_path, manifest: dict) -> Verdict:
    """Check an exported file against its manifest: signature, file hash, and every row's hash."""
    if not hmac.compare_digest(manifest.get("signature", ""), sign_manifest(manifest)):
        return Verdict(False, 0, None, "the manifest's signature does not match (wrong key or edited manifest)")
    if _file_sha256(export_path) != manifest.get("file_sha256"):
        return Verdict(False, 0, None, "the file's SHA-256 differs from the manifest")
    checked, previous = 0, None
    for row in _read_rows(export_path, manifest["format"]):
        if chain_hash(row["prev_hash"], row_document(row)) != row["hash"] or (
                previous and row["seq"] == previous["seq"] + 1 and row["prev_hash"] != previous["hash"]):
            return Verdict(False, checked, row["seq"], f"row {row['seq']} in the file was modified")
        checked, previous = checked + 1, row
    if checked != manifest.get("row_count") or (previous and previous["hash"] != manifest.get("final_chain_hash")):
        return Verdict(False, checked, None, "the file's rows do not match the manifest's count or final hash")
    return Verdict(True, checked)


def _file_sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_rows(path, fmt: str):
    with open(path, newline="", encoding="utf-8") as handle:
        if fmt == "jsonl":
            yield from (json.loads(line) for line in handle if line.strip())
            return
        for row in csv.DictReader(handle):
            yield _typed_csv_row(row)


def _typed_csv_row(row: dict) -> dict:
    for name in ("seq", "actor_id", "tenant_id"):
        row[name] = int(row[name]) if row[name] != "" else None
    for name in JSON_COLUMNS:
        row[name] = json.loads(row[name]) if row[name] != "" else None
    return row
