"""Request bodies: every string that can reach the engine redacted (or blocked) under the tenant's mode."""
from __future__ import annotations

from enum import StrEnum
from typing import Any, Iterable, NamedTuple

from gateway.pipeline.redaction.members import MIN_MEMBER_VALUE, PLAIN_KEYS, _member_value, secret_named
from gateway.pipeline.redaction.patterns import MIN_SECRET_CHARS
from gateway.pipeline.redaction.text import redact_text


class RedactionMode(StrEnum):
    OFF = "off"
    REDACT = "redact"
    BLOCK = "block"  # the caller answers 400 when anything is found


class RedactionResult(NamedTuple):
    """The body to forward (unchanged unless mode is redact) and what was found, by kind."""

    body: Any
    counts: dict[str, int]
    mode: RedactionMode = RedactionMode.REDACT
    found: int = 0  # secrets found, all kinds together (the sum of counts)

    @property
    def blocked(self) -> bool:
        return self.found > 0 and self.mode is RedactionMode.BLOCK


# Bodies: every string that can reach the engine is scanned, wherever it sits (messages, parts of
# any type, tools, schemas, unknown fields) and dict keys too (vLLM logs the names of fields it
# ignores) — but the model name, which is looked up and never forwarded unknown. Base64 media are
# scanned like text: whatever the bytes, they reach the engine (docs/redaction.md).
# Containers are copied only where something was replaced: most bodies hold no secret.
_NUMBER_TYPES = (int, float, bool)
_NOTHING: frozenset[str] = frozenset()


def numbers_only(items: Iterable) -> bool:
    """All numbers (token ids, biases)? sum() finds out without a loop in Python."""
    try:
        sum(items)
    except TypeError:
        return False
    return True


def _redact_list(items: list, counts: dict[str, int]) -> list:
    if len(items) > 8 and type(items[0]) in _NUMBER_TYPES and numbers_only(items):
        return items
    out = None
    for i, item in enumerate(items):
        kind = type(item)
        if kind is str:
            if len(item) < MIN_SECRET_CHARS:
                continue
            redacted: str | dict | list = redact_text(item, counts)
        elif kind is dict:
            redacted = _redact_dict(item, counts)
        elif kind is list:
            redacted = _redact_list(item, counts)
        else:
            continue
        if redacted is not item:
            out = out or list(items)
            out[i] = redacted
    return items if out is None else out


def _redact_dict(value: dict, counts: dict[str, int], keep: frozenset[str] = _NOTHING) -> dict:
    """A JSON object with every string in it redacted, keys included (but the values of `keep`)."""
    changed = None
    for key, item in value.items():
        kind = type(item)
        if kind is str:
            redacted = item if len(item) < MIN_SECRET_CHARS or key in keep else redact_text(item, counts)
            if redacted is item and len(item) >= MIN_MEMBER_VALUE and key not in PLAIN_KEYS and secret_named(key) \
                    and key not in keep:
                redacted = _member_value(key, item, counts)
        elif kind is dict:
            redacted = _redact_dict(item, counts)
        elif kind is list:
            redacted = _redact_list(item, counts)
        else:
            redacted = item
        new_key = key if len(key) < MIN_SECRET_CHARS else redact_text(key, counts)
        if redacted is not item or new_key is not key:
            changed = changed or []
            changed.append((key, new_key, redacted))
    if changed is None:
        return value
    out = dict(value)
    for key, new_key, redacted in changed:
        if new_key is not key:
            del out[key]
        out[new_key] = redacted
    return out


# The model name is looked up in the registry and never forwarded unknown
# (gateway/pipeline/inference.py).
_UNSCANNED = frozenset({"model"})
_MODES = {mode.value: mode for mode in RedactionMode}  # a StrEnum member finds itself too


def _result(body: Any, counts: dict[str, int], mode: RedactionMode, found: int = 0) -> RedactionResult:
    return tuple.__new__(RedactionResult, (body, counts, mode, found))  # skips NamedTuple's Python __new__


def redact_body(body: dict, mode: RedactionMode | str = RedactionMode.REDACT,
                texts: list[str] | None = None) -> RedactionResult:
    """Scan a completions or chat request body (every field that reaches the engine) under the given mode.

    `texts`: every string of the body long enough to hold a secret (what
    gateway.pipeline.payload.json_object collected): when none does, the body is not walked at all.
    """
    checked = _MODES.get(mode)  # RedactionMode(mode), by a dict lookup
    if checked is None:
        raise ValueError(f"{mode!r} is not a valid RedactionMode")
    if checked is RedactionMode.OFF or not isinstance(body, dict) or (texts is not None and _all_clean(texts)):
        return _result(body, {}, checked)
    counts: dict[str, int] = {}
    redacted = _redact_dict(body, counts, _UNSCANNED)
    if not counts:
        return _result(body, counts, checked)
    # Redact: untouched fields shared with the caller's body; block: the caller's own body goes on as it came.
    return _result(redacted if checked is RedactionMode.REDACT else body, counts, checked, sum(counts.values()))


def _all_clean(texts: list[str]) -> bool:
    for text in texts:
        if redact_text(text) is not text:
            return False
    return True
