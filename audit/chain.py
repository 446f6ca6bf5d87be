"""Hashing rules of the audit chain: one canonical form, used when writing and verifying."""
import hashlib
import hmac
import json
from datetime import datetime, timezone

from django.conf import settings

GENESIS_HASH = "0" * 64

# The fields covered by a row's hash, in the order they appear in exports.
HASHED_FIELDS = (
    "seq", "occurred_at", "actor_id", "actor_label", "actor_type", "tenant_id", "tenant_slug",
    "action", "target_type", "target_id", "before", "after", "request_id", "source_ip",
)


def format_time(value: datetime) -> str:
    """UTC ISO-8601 with microseconds: identical text whatever the database returns."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def row_document(event) -> dict:
    """The hashed fields of an event (model instance or exported dict) as plain JSON values."""
    get = event.get if isinstance(event, dict) else lambda name: getattr(event, name)
    doc = {name: get(name) for name in HASHED_FIELDS}
    if isinstance(doc["occurred_at"], datetime):
        doc["occurred_at"] = format_time(doc["occurred_at"])
    return doc


def canonical_json(document: dict) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def chain_hash(prev_hash: str, document: dict) -> str:
    """hash = SHA-256(prev_hash ‖ canonical JSON of the row)."""
    return hashlib.sha256(prev_hash.encode() + canonical_json(document)).hexdigest()


def sign(message: str) -> str:
    """HMAC-SHA256 with the audit signing key (heads and export manifests)."""
    key = settings.SWITCHYARD_AUDIT_SIGNING_KEY.encode()
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def head_message(seq: int, hash_: str) -> str:
    return f"audit-head:{seq}:{hash_}"
