"""Find secrets in prompt text and replace them with `[REDACTED:<kind>]` before a model sees them.

Each pattern carries cheap literal anchors; a text is only searched with a pattern's regex when
one of its anchors occurs in it. Ten probes led by rare literals find the anchors (one combined
search for short texts), so a prompt without secrets costs a few C-level scans.
Results report counts per kind, never the secret values.

The package: patterns.py (the kinds of secret), probes.py (which kinds may occur), text.py (one text),
members.py (secret-named JSON members), body.py (whole request bodies and the redaction modes).
"""
from gateway.pipeline.redaction.body import RedactionMode, RedactionResult, numbers_only, redact_body
from gateway.pipeline.redaction.members import MAX_PLAIN_KEYS, MIN_MEMBER_VALUE, PLAIN_KEYS, member_text, secret_named
from gateway.pipeline.redaction.patterns import _SECRET_NAME as _SECRET_NAME  # tests look at it
from gateway.pipeline.redaction.patterns import (
    GENERIC_ASSIGNMENT,
    MIN_GENERIC_ENTROPY,
    MIN_SECRET_CHARS,
    PATTERNS,
    PLACEHOLDER,
    Pattern,
    SecretKind,
    looks_random,
    shannon_entropy,
)
from gateway.pipeline.redaction.probes import SHORT_TEXT, Probe, kinds_present
from gateway.pipeline.redaction.text import (
    CACHED_TEXT_CHARS,
    MAX_CLEAN_TEXTS,
    PREFIX_MARGIN,
    holds_secret,
    redact_prefix,
    redact_text,
)
from gateway.pipeline.redaction.text import _keyword_matches as _keyword_matches  # tests look at it

__all__ = [
    "CACHED_TEXT_CHARS",
    "GENERIC_ASSIGNMENT",
    "MAX_CLEAN_TEXTS",
    "MAX_PLAIN_KEYS",
    "MIN_GENERIC_ENTROPY",
    "MIN_MEMBER_VALUE",
    "MIN_SECRET_CHARS",
    "PATTERNS",
    "PLACEHOLDER",
    "PLAIN_KEYS",
    "PREFIX_MARGIN",
    "Pattern",
    "Probe",
    "RedactionMode",
    "RedactionResult",
    "SHORT_TEXT",
    "SecretKind",
    "holds_secret",
    "kinds_present",
    "looks_random",
    "member_text",
    "numbers_only",
    "redact_body",
    "redact_prefix",
    "redact_text",
    "secret_named",
    "shannon_entropy",
]
