"""Secrets in one text: found and replaced pattern by pattern, with a cache of texts found clean."""
from __future__ import annotations

import re
from typing import Any, Iterable, Iterator

from gateway.pipeline.redaction.patterns import (
    _TOKEN_CHARS,
    GENERIC_ASSIGNMENT,
    MIN_SECRET_CHARS,
    PATTERNS,
    PLACEHOLDER,
    Pattern,
    SecretKind,
)
from gateway.pipeline.redaction.probes import kinds_present


def _matched_group(match: re.Match, group: str | int | tuple[str, ...]) -> str | int:
    if isinstance(group, tuple):
        return next(name for name in group if match.group(name) is not None)
    return group


def _is_secret(match: re.Match, pattern: Pattern, group: str | int) -> bool:
    value = match.group(group)
    if value.startswith("[REDACTED:") or (pattern.validate and not pattern.validate(value)):
        return False
    start = match.start()
    return not (pattern.bounded and start and match.string[start - 1] in _TOKEN_CHARS)


# Where a secret-ish name may start in lower-cased text: scans led by one literal each (fast in
# sre), and per branch the distance from the lead back to the name's start. `client_secret` is
# found at `secret`: the assignment matched from there is the same, its name running to the same end.
_KEYWORD_LEADS: tuple[tuple[re.Pattern, tuple[int, ...]], ...] = (
    (re.compile("secret()"), (0,)),
    (re.compile("k(?:(?<=tok)en()|ey(?:(?<=apikey)()|(?<=api_key)()|(?<=privatekey)()|(?<=private_key)()"
                "|(?<=accesskey)()|(?<=access_key)()))"),
     (2, 3, 4, 7, 8, 6, 7)),
    (re.compile("w(?<=passw)(?:d|ord)()"), (4,)),
)


def _keyword_starts(lowered: str) -> list[int]:
    starts = []
    for regex, back in _KEYWORD_LEADS:
        starts += [hit.start() - back[hit.lastindex - 1]  # type: ignore[operator]  # each alternative is a group
                   for hit in regex.finditer(lowered)]
    starts.sort()
    return starts


def _keyword_matches(text: str, lowered: str) -> Iterator[re.Match]:
    """Generic assignments, tried only where a secret-ish name occurs (cheap on big prompts)."""
    if len(lowered) != len(text):  # rare Unicode whose lower case changes length
        yield from GENERIC_ASSIGNMENT.finditer(text)
        return
    resume = 0
    for start in _keyword_starts(lowered):
        match = start >= resume and GENERIC_ASSIGNMENT.match(text, start)
        if match:
            resume = match.end()
            yield match


def _apply(text: str, pattern: Pattern, matches: Iterable[re.Match], counts: dict[str, int]) -> str:
    pieces, cursor = [], 0
    kind = pattern.kind.value
    for match in matches:
        group = _matched_group(match, pattern.group)
        if _is_secret(match, pattern, group):
            counts[kind] = counts.get(kind, 0) + 1
            pieces += [text[cursor:match.start(group)], PLACEHOLDER.format(kind=kind)]
            cursor = match.end(group)
    return "".join(pieces) + text[cursor:] if pieces else text


# Texts found clean, by value: clients send the same tool descriptions, schemas, system prompts and
# earlier turns again on every request, and a short text costs about as much to scan as a long
# one. Only secret-free texts are kept; the set is emptied when full.
CACHED_TEXT_CHARS = 1024
MAX_CLEAN_TEXTS = 8192
_CLEAN_TEXTS: set[str] = set()


def _remember_clean(text: str) -> None:
    if len(_CLEAN_TEXTS) >= MAX_CLEAN_TEXTS:
        _CLEAN_TEXTS.clear()
    _CLEAN_TEXTS.add(text)


def redact_text(text: str, counts: dict[str, int] | None = None) -> str:
    """Return text with every secret replaced (the same object when none is found); add to counts."""
    size = len(text)
    if size < MIN_SECRET_CHARS:  # roles, part types, short field values: nothing fits
        return text
    if size <= CACHED_TEXT_CHARS and text in _CLEAN_TEXTS:
        return text
    redacted: Any = _redacted(text)  # text itself, or (text, counts)
    if redacted is text:
        if size <= CACHED_TEXT_CHARS:
            _remember_clean(text)
        return text
    if counts is not None:
        for kind, found in redacted[1].items():
            counts[kind] = counts.get(kind, 0) + found
    return redacted[0]


def holds_secret(text: str) -> bool:
    """Whether text holds a secret; for one-off texts such as ids (redact_text remembers clean ones)."""
    return len(text) >= MIN_SECRET_CHARS and _redacted(text) is not text


def _redacted(text: str) -> str | tuple[str, dict[str, int]]:
    """text itself when it holds no secret, else (the redacted text, counts by kind)."""
    lowered = text.lower()
    kinds = kinds_present(text, lowered)
    if not kinds:  # the common case: no anchor of any pattern occurs
        return text
    original = text
    counts: dict[str, int] = {}
    for pattern in PATTERNS:
        if pattern.kind not in kinds:
            continue
        if pattern.kind is SecretKind.GENERIC_SECRET:
            matches = _keyword_matches(text, lowered)
        else:
            matches = pattern.regex.finditer(text)
        redacted = _apply(text, pattern, list(matches), counts)
        if redacted is not text:  # later patterns index into the lower-cased copy
            text, lowered = redacted, redacted.lower()
    return original if text is original else (text, counts)


def redact_prefix(text: str, limit: int) -> str:
    """The first `limit` characters of text, with every secret that reaches into them redacted.

    Redacted before it is cut, with a margin, so a secret straddling the cut is not left half
    there (a private key cut by the margin is still hidden: its pattern runs to the end of text).
    """
    return redact_text(text[:limit + PREFIX_MARGIN])[:limit]


PREFIX_MARGIN = 4096  # longer than any token-shaped secret (JWTs, the first lines of a 4096-bit key)
