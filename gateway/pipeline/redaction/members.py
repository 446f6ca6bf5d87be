"""JSON members whose key names a secret (`{"password": "…"}`): the value is read as an assignment."""
from __future__ import annotations

import re

from gateway.pipeline.redaction.patterns import _SECRET_NAME, PLACEHOLDER
from gateway.pipeline.redaction.text import _redacted

# A JSON member is an assignment too: {"password": "Xk9m..."} (tool arguments as an object,
# metadata, template kwargs) is read as `password: "Xk9m..."` — by the generic rule and the AWS
# secret-key rule, the ones that need a name — and its value replaced if that is a secret.
MIN_MEMBER_VALUE = 12  # the generic rule's shortest value
_SECRET_NAMED_KEY = re.compile(_SECRET_NAME, re.IGNORECASE)
# Keys found not to name a secret (they are mostly field names): `key not in PLAIN_KEYS` first
# costs one set lookup per key, before any call.
PLAIN_KEYS: set[str] = set()
MAX_PLAIN_KEYS = 4096


def secret_named(key: str) -> bool:
    """Whether an object key names a secret (`password`, `api_key`, `clientSecret`...)."""
    if key in PLAIN_KEYS:
        return False
    if _SECRET_NAMED_KEY.search(key):
        return True
    if len(PLAIN_KEYS) >= MAX_PLAIN_KEYS:
        PLAIN_KEYS.clear()
    PLAIN_KEYS.add(key)
    return False


def member_text(key: str, value: str) -> str:
    """How a secret-named member reads as an assignment."""
    return f'{key}: "{value}"'


def _member_value(key: str, value: str, counts: dict[str, int]) -> str:
    text = member_text(key, value)
    found = _redacted(text)
    if found is not text:
        for kind in found[1]:
            placeholder = PLACEHOLDER.format(kind=kind)
            if found[0].endswith(f'"{placeholder}"'):  # the value was the secret (not something in the key)
                counts[kind] = counts.get(kind, 0) + 1
                return placeholder
    return value
