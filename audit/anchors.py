"""Anchors: what someone outside the database saw of the chain, which the chain must still agree with.

A rolled-back chain is a valid, older chain: its hashes and its signed head all check out. Only a
record kept elsewhere can tell — a signed export manifest (it names the head when it was issued)
or a witness file (every signed head, as it was committed). Each gives anchors: "row `seq` had
hash `hash`". The database must reach every anchor's row, and hold that very row there.
"""
import hmac
import json
import re
from dataclasses import dataclass
from typing import TypeGuard

from audit.chain import GENESIS_HASH, head_message, sign
from audit.export import MANIFEST_ISSUE, manifest_digest, sign_manifest
from audit.models import AuditEvent

HEX64 = re.compile(r"[0-9a-f]{64}")
LOOKUP_BATCH = 1000


class AnchorError(ValueError):
    """A manifest or witness entry that cannot be trusted as it stands (malformed, or signed with another key)."""


@dataclass(frozen=True)
class Anchor:
    """Row `seq` had hash `hash` when `source` saw it."""

    seq: int
    hash: str
    source: str


def _is_seq(value) -> TypeGuard[int]:
    # Within a 64-bit seq column: a larger number must be refused here, not by the database.
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2 ** 63


def _is_hex(value) -> TypeGuard[str]:
    return isinstance(value, str) and HEX64.fullmatch(value) is not None


def check_manifest_signature(manifest) -> None:
    """Raise AnchorError unless `manifest` is a JSON object signed with this installation's key."""
    if not isinstance(manifest, dict) or not _is_hex(manifest.get("signature")):
        raise AnchorError("the manifest is not a signed manifest (no 64-hex-digit signature)")
    try:
        expected = sign_manifest(manifest)
    except UnicodeEncodeError:  # a lone surrogate: no manifest we signed holds one
        raise AnchorError("the manifest is not a signed manifest (it holds text that is not valid Unicode)") from None
    if not hmac.compare_digest(manifest["signature"], expected):
        raise AnchorError("the manifest's signature does not match (wrong key or edited manifest)")


def manifest_anchors(manifest) -> list[Anchor]:
    """The rows a signed manifest vouches for: the chain head when issued, and the export's last row."""
    check_manifest_signature(manifest)
    source = manifest_name(manifest)
    anchors = []
    for seq_name, hash_name in (("chain_head_seq", "chain_head_hash"), ("last_seq", "final_chain_hash")):
        seq, hash_ = manifest.get(seq_name), manifest.get(hash_name)
        if seq is None and hash_ is None:
            continue  # an empty export has no last row; manifests before chaining have no head
        if not _is_seq(seq) or not _is_hex(hash_):
            raise AnchorError(f"{source}: {seq_name}/{hash_name} are not a row number and a hash")
        anchors.append(Anchor(seq, hash_, source))
    return anchors


def manifest_name(manifest: dict) -> str:
    number = manifest.get("manifest_seq")
    return f"manifest #{number} (issued {manifest.get('generated_at')})" if _is_seq(number) else "the manifest"


def manifest_record_problem(manifest: dict, end_seq: int) -> tuple[int, str] | None:
    """(seq, reason) when the chain does not record this manifest's issue where it must be, else None.

    `issue_manifest` records the issue right after the head it names (head seq + 1), under the
    head's lock. A chain rolled back to that head and extended again holds another row there.
    """
    head_seq = manifest.get("chain_head_seq")
    if not _is_seq(head_seq):
        return None  # a manifest from before chaining: its rows are all there is to check
    seq = head_seq + 1
    issue = AuditEvent.objects.filter(seq=seq).only("action", "after").first()
    if issue is None:
        return end_seq + 1, (f"the database was rolled back: {manifest_name(manifest)} was recorded as row {seq}, "
                             f"but the chain ends at row {end_seq}")
    after = issue.after if isinstance(issue.after, dict) else {}
    if issue.action != MANIFEST_ISSUE or after.get("manifest_sha256") != manifest_digest(manifest):
        return seq, (f"the chain diverged from {manifest_name(manifest)}: row {seq} should record its issue but "
                     "holds something else (the chain was rolled back and written again)")
    return None


def witness_anchors(path, upto: int | None = None):
    """Anchors from a witness file's lines, up to byte `upto` (its size when verification began)."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return  # nothing witnessed yet (a fresh install); the anchors count says so
    except OSError as exc:
        raise AnchorError(f"cannot read the witness file {path}: {exc}") from None
    with handle:
        consumed = 0
        for number, line in enumerate(handle, start=1):
            consumed += len(line)
            if upto is not None and consumed > upto:
                break  # written after verification began
            if line.strip():
                yield _witness_anchor(line, f"the witness file {path}, line {number}")


def _witness_anchor(line: bytes, source: str) -> Anchor:
    try:
        entry = json.loads(line)
    except ValueError:
        raise AnchorError(f"{source} is not JSON") from None
    seq, hash_, signature = (entry.get(name) if isinstance(entry, dict) else None
                             for name in ("seq", "hash", "signature"))
    if not _is_seq(seq) or not _is_hex(hash_) or not _is_hex(signature):
        raise AnchorError(f"{source} is not a signed chain head")
    if not hmac.compare_digest(signature, sign(head_message(seq, hash_))):
        raise AnchorError(f"{source} has a signature that does not match (edited, or signed with another key)")
    return Anchor(seq, hash_, source)


def first_anchor_problem(anchors, end_seq: int) -> tuple[tuple[int, str] | None, int]:
    """((seq, reason) or None, anchors checked): the first anchor the chain ending at `end_seq` breaks."""
    checked = 0
    for batch in _batches(anchors, LOOKUP_BATCH):
        hashes = dict(AuditEvent.objects.filter(seq__in={a.seq for a in batch}).values_list("seq", "hash"))
        hashes[0] = GENESIS_HASH
        for anchor in batch:
            problem = _anchor_problem(anchor, hashes.get(anchor.seq), end_seq)
            if problem:
                return problem, checked
            checked += 1
    return None, checked


def _anchor_problem(anchor: Anchor, found: str | None, end_seq: int) -> tuple[int, str] | None:
    if found is None:
        return end_seq + 1, (f"the database was rolled back: {anchor.source} saw row {anchor.seq}, "
                             f"but the chain ends at row {end_seq}")
    if found != anchor.hash:
        return anchor.seq, (f"the chain diverged from {anchor.source}: row {anchor.seq} is not the row it saw "
                            f"(rewritten at or before row {anchor.seq})")
    return None


def _batches(items, size: int):
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
