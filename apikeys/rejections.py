"""How many audit rows rejected API keys may write: a flood of bad keys must not flood the audit chain.

Every audited write takes the chain head's lock, so one row per rejected attempt would let anyone
without a key serialize the control plane's writes and grow the append-only table at will. Rows
are therefore sampled per (key prefix, reason) and capped overall, per window
(`SWITCHYARD_REJECTED_KEY_AUDIT_WINDOW_SECONDS`, default 60; 0 records every attempt):
- the first rejection of a (prefix, reason) in a window is recorded; repeats are only counted,
  and the count rides on that pair's next recorded row (`similar_attempts_not_recorded`);
- at most `SWITCHYARD_REJECTED_KEY_AUDIT_MAX_ROWS` (default 100) rows per window in all, so made-up
  keys with ever-new prefixes cannot get around the sampling; the rest are counted and reported
  on the next recorded row (`other_attempts_not_recorded`).
Counters live in Django's cache (Redis when configured, so shared by every control-plane process).
"""
from __future__ import annotations

import hashlib

from django.conf import settings
from django.core.cache import cache

from controlplane.counters import count_in_window

ROWS_KEY = "auth-rejected:rows"
OVERFLOW_KEY = "auth-rejected:overflow"


def rejection_row_extras(label: str, reason: str) -> dict | None:
    """Extra fields for this rejection's audit row, or None when it is only counted."""
    window = settings.SWITCHYARD_REJECTED_KEY_AUDIT_WINDOW_SECONDS
    if window <= 0:
        return {}
    slot = window_key(label, reason)
    if not cache.add(slot, 1, window):
        count_in_window(slot + ":n", window * 10)
        return None
    if count_in_window(ROWS_KEY, window) > settings.SWITCHYARD_REJECTED_KEY_AUDIT_MAX_ROWS:
        count_in_window(OVERFLOW_KEY, window * 10)
        return None
    extras = {}
    for key, name in ((slot + ":n", "similar_attempts_not_recorded"), (OVERFLOW_KEY, "other_attempts_not_recorded")):
        pending = cache.get(key)
        if pending:
            cache.decr(key, pending)  # not delete: attempts counted meanwhile stay for the next row
            extras[name] = pending
    return extras


def window_key(label: str, reason: str) -> str:
    """The cache key whose presence means this (prefix, reason) was recorded in the current window."""
    return "auth-rejected:" + hashlib.sha256(f"{label}\0{reason}".encode()).hexdigest()[:24]

