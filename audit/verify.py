"""Checking the audit chain (in the database, against anchors kept outside it, or an exported file)."""
import csv
import hashlib
import hmac
import json
import os
from dataclasses import dataclass

from django.conf import settings

from audit.anchors import (
    AnchorError,
    check_manifest_signature,
    first_anchor_problem,
    manifest_anchors,
    manifest_record_problem,
    witness_anchors,
)
from audit.chain import GENESIS_HASH, chain_hash, head_message, row_document, sign
from audit.export import JSON_COLUMNS, MANIFEST_ISSUE
from audit.models import AuditChainHead, AuditEvent


@dataclass(frozen=True)
class Verdict:
    """Outcome of a verification: `first_bad_seq` names the first row that does not hold."""

    ok: bool
    checked: int
    first_bad_seq: int | None = None
    reason: str = ""
    head_seq: int | None = None
    anchors_checked: int = 0


def verify_trail(*, manifests=(), witness_files=None) -> Verdict:
    """The chain, then every anchor outside it: the manifests given and the witness files.

    `witness_files` defaults to the configured SWITCHYARD_AUDIT_WITNESS_FILE. Without any anchor a
    chain rolled back to an earlier head cannot be told from that earlier chain: this is what can.
    """
    if witness_files is None:
        witness_files = [settings.SWITCHYARD_AUDIT_WITNESS_FILE] if settings.SWITCHYARD_AUDIT_WITNESS_FILE else []
    try:
        manifest_points = [anchor for manifest in manifests for anchor in manifest_anchors(manifest)]
    except AnchorError as exc:
        return Verdict(False, 0, None, str(exc))
    # Witness lines are read only up to the size they had before the walk: every head they name
    # was committed before the walk began, so a head appended meanwhile is not mistaken for a rollback.
    sizes = [(path, _size(path)) for path in witness_files]
    verdict = verify_chain()
    if not verdict.ok or verdict.head_seq is None:  # a sound chain always names its head
        return verdict
    return _check_anchors(verdict, verdict.head_seq, manifests, manifest_points, sizes)


def _check_anchors(verdict: Verdict, end: int, manifests, manifest_points, sizes) -> Verdict:
    total = 0
    try:
        for anchors in [manifest_points] + [witness_anchors(path, size) for path, size in sizes]:
            problem, checked = first_anchor_problem(anchors, end)
            total += checked
            if problem:
                return Verdict(False, verdict.checked, *problem, head_seq=end, anchors_checked=total)
    except AnchorError as exc:
        return Verdict(False, verdict.checked, None, str(exc), head_seq=end, anchors_checked=total)
    for manifest in manifests:
        problem = manifest_record_problem(manifest, end)
        if problem:
            return Verdict(False, verdict.checked, *problem, head_seq=end, anchors_checked=total)
    return Verdict(True, verdict.checked, head_seq=end, anchors_checked=total)


def _size(path) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None  # reported when the file is read (missing: nothing witnessed yet)


def verify_chain() -> Verdict:
    """Walk every row in seq order; any modified, deleted, inserted or reordered row breaks it."""
    expected_seq, prev_hash, checked, manifests = 1, GENESIS_HASH, 0, _ManifestLinks()
    for event in AuditEvent.objects.order_by("seq").iterator(chunk_size=2000):
        problem = _row_problem(event, expected_seq, prev_hash) or manifests.problem(event)
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


class _ManifestLinks:
    """The issue events form a chain of their own: each names the previous manifest and the row before it."""

    def __init__(self):
        self.number, self.digest = 0, None

    def problem(self, event):
        if event.action != MANIFEST_ISSUE:
            return None
        record = event.after if isinstance(event.after, dict) else {}
        if (record.get("manifest_seq") != self.number + 1 or record.get("previous_manifest_sha256") != self.digest
                or record.get("chain_head_seq") != event.seq - 1 or record.get("chain_head_hash") != event.prev_hash):
            return event.seq, (f"row {event.seq} records a manifest that does not follow manifest #{self.number} "
                               "(the record of issued manifests is broken)")
        self.number, self.digest = record["manifest_seq"], record.get("manifest_sha256")
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
    return Verdict(True, checked, head_seq=last_seq)


def verify_export(export_path, manifest: dict) -> Verdict:
    """Check an exported file against its manifest: signature, file hash, every row's hash, order, count."""
    try:
        check_manifest_signature(manifest)
    except AnchorError as exc:
        return Verdict(False, 0, None, str(exc))
    if _file_sha256(export_path) != manifest.get("file_sha256"):
        return Verdict(False, 0, None, "the file's SHA-256 differs from the manifest")
    rows = _ExportRows(complete=manifest.get("whole_chain") is True)
    for row in _read_rows(export_path, manifest.get("format")):
        problem = rows.problem(row)
        if problem:
            return Verdict(False, rows.checked, *problem)
    if (rows.checked, rows.first_seq, rows.last_seq, rows.last_hash) != (
            manifest.get("row_count"), manifest.get("first_seq"), manifest.get("last_seq"),
            manifest.get("final_chain_hash")):
        return Verdict(False, rows.checked, None, "the file's rows do not match the manifest's count, first/last row "
                                                  "or final hash")
    return Verdict(True, rows.checked)


class _ExportRows:
    """Rows of an export must each re-hash, rise in seq, and link wherever seqs are consecutive.

    A manifest stating `whole_chain` vouches that the file starts at row 1 and has no gap.
    """

    def __init__(self, complete: bool):
        self.complete, self.checked = complete, 0
        self.first_seq = self.last_seq = self.last_hash = None

    def problem(self, row):
        seq = row["seq"]
        if chain_hash(row["prev_hash"], row_document(row)) != row["hash"]:
            return seq, f"row {seq} in the file was modified"
        if self.last_seq is not None and seq <= self.last_seq:
            return seq, f"row {seq} in the file comes after row {self.last_seq} (rows reordered or repeated)"
        expected = 1 if self.last_seq is None else self.last_seq + 1
        if self.complete and seq != expected:
            return expected, f"row {expected} is missing from the file (its manifest says it holds the whole chain)"
        linked_to = GENESIS_HASH if seq == 1 else self.last_hash if seq == expected else None
        if linked_to is not None and row["prev_hash"] != linked_to:
            return seq, f"row {seq} in the file does not link to row {seq - 1}"
        self.first_seq = seq if self.first_seq is None else self.first_seq
        self.last_seq, self.last_hash, self.checked = seq, row["hash"], self.checked + 1
        return None


def _file_sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_rows(path, fmt: str | None):
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
