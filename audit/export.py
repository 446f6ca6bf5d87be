"""Streaming exports of the audit trail (CSV or JSON Lines) and their signed manifests.

Rows are read with a server-side cursor and written a chunk at a time, so memory stays flat
whatever the size of the trail.
"""
import csv
import hashlib
import io
import json
from dataclasses import dataclass, field

from django.utils import timezone

from audit.chain import HASHED_FIELDS, canonical_json, format_time, sign

EXPORT_FIELDS = HASHED_FIELDS + ("prev_hash", "hash")
FORMATS = ("csv", "jsonl")
JSON_COLUMNS = ("before", "after")
ROWS_PER_CHUNK = 500
# The audit action that records each issued manifest (audit.services.issue_manifest).
MANIFEST_ISSUE = "audit.manifest_issue"


def export_row(event) -> dict:
    row = {name: getattr(event, name) for name in EXPORT_FIELDS}
    row["occurred_at"] = format_time(event.occurred_at)
    return row


def _jsonl_chunks(rows):
    lines = []
    for row in rows:
        lines.append(json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n")
        if len(lines) >= ROWS_PER_CHUNK:
            yield "".join(lines)
            lines = []
    if lines:
        yield "".join(lines)


def _csv_chunks(rows):
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(EXPORT_FIELDS)
    for count, row in enumerate(rows, start=1):
        writer.writerow([_csv_cell(name, row[name]) for name in EXPORT_FIELDS])
        if count % ROWS_PER_CHUNK == 0:
            yield _drain(buffer)
    yield _drain(buffer)


def _csv_cell(name, value):
    if name in JSON_COLUMNS:
        return "" if value is None else json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "" if value is None else value


def _drain(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text


@dataclass
class ManifestBuilder:
    """Accumulates what a manifest states while the export streams past."""

    fmt: str
    filters: dict
    digest: "hashlib._Hash" = field(default_factory=hashlib.sha256)
    row_count: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    final_hash: str | None = None

    def observe_event(self, event) -> None:
        self.row_count += 1
        self.first_seq = event.seq if self.first_seq is None else self.first_seq
        self.last_seq, self.final_hash = event.seq, event.hash

    def observe_bytes(self, chunk: bytes) -> None:
        self.digest.update(chunk)

    def body(self) -> dict:
        """What the export itself states; `audit.services.issue_manifest` adds the chain links and signs it."""
        return {
            "format": self.fmt, "filters": self.filters, "row_count": self.row_count,
            "first_seq": self.first_seq, "last_seq": self.last_seq, "final_chain_hash": self.final_hash,
            "file_sha256": self.digest.hexdigest(), "generated_at": format_time(timezone.now()),
            # Every row from 1 to last_seq is in the file (whatever the filters and the caller's scope):
            # then verification also insists on no gap.
            "whole_chain": self.row_count == 0 or (self.first_seq == 1 and self.last_seq == self.row_count),
        }


def sign_manifest(body: dict) -> str:
    """HMAC-SHA256 (audit signing key) of the manifest's canonical JSON, signature excluded."""
    return sign(canonical_json({k: v for k, v in body.items() if k != "signature"}).decode())


def manifest_digest(manifest: dict) -> str:
    """SHA-256 of a whole signed manifest (signature included): how the next manifest names it."""
    return hashlib.sha256(canonical_json(manifest)).hexdigest()


def stream_with_manifest(events, fmt: str, filters: dict):
    """Yield encoded export chunks while filling a ManifestBuilder; returns (chunks, builder)."""
    builder = ManifestBuilder(fmt=fmt, filters=filters)

    def observed_events():
        for event in events.order_by("seq").iterator(chunk_size=2000):
            builder.observe_event(event)
            yield event

    def chunks():
        rows = (export_row(event) for event in observed_events())
        render = _csv_chunks if fmt == "csv" else _jsonl_chunks
        for text in render(rows):
            data = text.encode()
            builder.observe_bytes(data)
            yield data

    return chunks(), builder
