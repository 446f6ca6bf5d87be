"""Find secrets in prompt text and replace them with `[REDACTED:<kind>]` before a model sees them.

Each pattern carries cheap literal anchors; a text is only searched with a pattern's regex when
one of its anchors occurs in it. Ten probes led by rare literals find the anchors (one combined
search for short texts), so a prompt without secrets costs a few C-level scans.
Results report counts per kind, never the secret values.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Callable, Iterable, Iterator, NamedTuple

PLACEHOLDER = "[REDACTED:{kind}]"
# No pattern matches fewer characters: the shortest is a Slack token, `xoxb-` and 10 more
# (tests/gateway/test_redaction_probes.py checks every pattern's shortest match).
MIN_SECRET_CHARS = 15


class RedactionMode(StrEnum):
    OFF = "off"
    REDACT = "redact"
    BLOCK = "block"  # the caller answers 400 when anything is found


class SecretKind(StrEnum):
    PRIVATE_KEY = "private_key"
    JWT = "jwt"
    AWS_ACCESS_KEY = "aws_access_key"
    AWS_SECRET_KEY = "aws_secret_key"
    GITHUB_TOKEN = "github_token"
    GITLAB_TOKEN = "gitlab_token"
    SLACK_TOKEN = "slack_token"
    SLACK_WEBHOOK = "slack_webhook"
    OPENAI_KEY = "openai_key"
    SWITCHYARD_KEY = "switchyard_key"
    STRIPE_KEY = "stripe_key"
    GOOGLE_API_KEY = "google_api_key"
    GENERIC_SECRET = "generic_secret"


# A value that ends right here: not followed by more token characters.
_END = r"(?![0-9A-Za-z_\-])"
_TOKEN_CHARS = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-")
_SECRET_NAME = (
    r"(?:secret|token|passwd|password|api_?key|apikey|private_?key|access_?key|client_?secret)"
)
GENERIC_ASSIGNMENT = re.compile(
    # name[ending quote] (= | : | := | =>) then a quoted value, or a bare one up to a delimiter.
    # The match starts at the keyword: a lazy identifier prefix would cost a scan per position.
    r"(?P<name>" + _SECRET_NAME + r"[A-Za-z0-9_.\-]*)[\"']?[ \t]*(?::=|=>|=|:(?!:))[ \t]*"
    r"(?:(?P<quote>[\"'`])(?P<qvalue>[^\"'`\s]{12,})(?P=quote)"
    r"|(?P<value>[^\s\"'`,;()\[\]{}<>]{12,}))",
    re.IGNORECASE,
)
_NON_SECRET_VALUE = re.compile(
    r"""^(?:
        <[^>]*> | \$\{?[A-Za-z_][A-Za-z0-9_]*\}? | \{\{.*\}\} | %\(\w+\)s   # placeholders
      | [\w.]+\(.*\)                                         # a call: get_secret("db")
      | .*(?i:os\.environ|getenv|process\.env|\bconfig\.|\bsettings\.|vault:|arn:aws).*
      | (?i:https?|file|s3|gs|redis|postgres(?:ql)?)://[^@]*     # URLs without credentials
      | [A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+     # dotted paths: module.attr
      | [a-z]+(?:[_\-][a-z0-9]+)*                              # snake / kebab identifiers
      | [A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*                          # CONSTANT_NAMES
      | _*[a-z]+(?:[A-Z][a-z0-9]*)+ | (?:[A-Z][a-z0-9]+)+       # camelCase, PascalCase
      | [0-9]+ | [0-9a-f]{1,11}                                # numbers
      | .*(?i:x{4}|\*{3}|changeme|example|placeholder|your_|dummy|redacted).*
    )$""",
    re.VERBOSE,  # case matters here: identifier shapes are told apart by it
)
_GENERIC_ANCHORS = (
    "secret", "token", "passw", "apikey", "api_key", "privatekey", "private_key", "accesskey",
    "access_key",
)
MIN_GENERIC_ENTROPY = 3.0  # bits per character; random base62 of length 12+ sits above 3.4


def shannon_entropy(value: str) -> float:
    """Bits per character of the value's own character distribution."""
    counts = Counter(value)
    total = len(value)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def looks_random(value: str) -> bool:
    """A generic assignment's value is a secret when it is long, mixed and high-entropy."""
    if _NON_SECRET_VALUE.match(value):
        return False
    classes = sum(
        any(test(c) for c in value) for test in (str.islower, str.isupper, str.isdigit)
    )
    return classes >= 2 and shannon_entropy(value) >= MIN_GENERIC_ENTROPY


def _has_digit_and_letter(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


@dataclass(frozen=True, slots=True)
class Pattern:
    """One kind of secret: prefilter anchors, a regex, and the group that gets replaced."""

    kind: SecretKind
    anchors: tuple[str, ...]  # literals, one of which occurs in every match
    regex: re.Pattern
    group: str | int | tuple[str, ...] = 0  # a tuple: the first of those groups that matched
    validate: Callable[[str], bool] | None = None
    folded: bool = False  # anchors are lower-case and looked up in the lower-cased text
    bounded: bool = True  # the match may not continue a longer token on its left


_fold: dict[str, Any] = dict(folded=True, bounded=False)
PATTERNS: tuple[Pattern, ...] = (
    Pattern(SecretKind.PRIVATE_KEY, ("-----BEGIN",), re.compile(
        # A prompt cut mid-key still hides the rest of it: END is optional at end of text.
        r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\Z)"), bounded=False),
    Pattern(SecretKind.JWT, ("eyJ",), re.compile(
        r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}" + _END)),
    Pattern(SecretKind.SLACK_WEBHOOK, ("hooks.slack.com",), re.compile(
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{16,}")),
    Pattern(SecretKind.AWS_ACCESS_KEY, ("AKIA", "ASIA"), re.compile(
        r"(?:AKIA|ASIA)[0-9A-Z]{16}" + _END)),
    Pattern(SecretKind.AWS_SECRET_KEY, ("secret",), re.compile(
        r"(?:aws_?secret(?:_?access)?_?key|secret_?access_?key)[\"']?[ \t]*"
        r"(?::=|=>|=|:(?!:))[ \t]*[\"']?(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        re.IGNORECASE), "value", **_fold),
    Pattern(SecretKind.GITHUB_TOKEN, ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
            re.compile(r"(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{60,})"
                       + _END)),
    Pattern(SecretKind.GITLAB_TOKEN, ("glpat-",), re.compile(
        r"glpat-[0-9A-Za-z_\-]{20,}(?:\.[0-9A-Za-z_\-.]+)?")),
    Pattern(SecretKind.SLACK_TOKEN, ("xox", "xapp-"), re.compile(
        r"(?:xox[abposr]|xapp)-[0-9A-Za-z\-]{10,}" + _END), validate=_has_digit_and_letter),
    Pattern(SecretKind.SWITCHYARD_KEY, ("sy_",), re.compile(
        r"sy_(?:live|test|dev)_[0-9A-Za-z]{38}" + _END)),
    Pattern(SecretKind.STRIPE_KEY, ("_live_",), re.compile(
        r"(?:sk|rk)_live_[0-9A-Za-z]{24,}" + _END)),
    Pattern(SecretKind.GOOGLE_API_KEY, ("AIza",), re.compile(
        r"AIza[0-9A-Za-z_\-]{35}" + _END)),
    Pattern(SecretKind.OPENAI_KEY, ("sk-",), re.compile(
        # CSS classes like `sk-fading-circle` share the prefix: insist on digits and entropy.
        r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{32,}" + _END),
        validate=lambda v: _has_digit_and_letter(v) and shannon_entropy(v) >= 3.5),
    Pattern(SecretKind.GENERIC_SECRET, _GENERIC_ANCHORS, GENERIC_ASSIGNMENT,
            ("qvalue", "value"), validate=looks_random, **_fold),
)


@dataclass(frozen=True, slots=True)
class Probe:
    """One scan that tells which kinds may occur: a regex led by one literal, so sre skips in C.

    Each branch ends in an empty marker group; `match.lastindex` names the branch that hit.
    Together the probes see every pattern's anchors (tests/gateway/test_redaction_probes.py).
    """

    regex: re.Pattern
    kinds: tuple[tuple[SecretKind, ...], ...]  # by marker group number - 1
    folded: bool = True  # scans the lower-cased text (a superset for case-sensitive anchors)
    every: frozenset[SecretKind] = frozenset()  # all its kinds: once seen, later hits add nothing


def _probe(lead: str, branches: dict[str, tuple[SecretKind, ...]], folded: bool = True) -> Probe:
    body = "|".join(f"{branch}()" for branch in branches)
    kinds = tuple(branches.values())
    return Probe(re.compile(f"{lead}(?:{body})"), kinds, folded, frozenset(k for ks in kinds for k in ks))


_K = SecretKind
# Lead characters are rare in code ('k', 'j', 'w' ...), so each probe stops at few places; the rest
# of an anchor is checked around the lead (a look-behind for what precedes it).
_PROBES: tuple[Probe, ...] = (
    _probe("A", {"KIA": (_K.AWS_ACCESS_KEY,), "SIA": (_K.AWS_ACCESS_KEY,), "Iza": (_K.GOOGLE_API_KEY,)},
           folded=False),
    _probe("k", {r"(?<=hook)s\.slack\.com": (_K.SLACK_WEBHOOK,), "-(?<=sk-)": (_K.OPENAI_KEY,),
                 "(?<=tok)en": (_K.GENERIC_SECRET,),
                 "ey(?:(?<=apikey)|(?<=api_key)|(?<=privatekey)|(?<=private_key)|(?<=accesskey)|(?<=access_key))":
                     (_K.GENERIC_SECRET,)}),
    _probe("-", {"----begin": (_K.PRIVATE_KEY,), "(?<=glpat-)": (_K.GITLAB_TOKEN,),
                 "(?<=xapp-)": (_K.SLACK_TOKEN,)}),
    _probe("g", {"h[pousr]_": (_K.GITHUB_TOKEN,), "ithub_pat_": (_K.GITHUB_TOKEN,)}),
    _probe("j", {"(?<=eyj)": (_K.JWT,)}),
    _probe("x", {"ox": (_K.SLACK_TOKEN,)}),
    _probe("y", {"(?<=sy)_": (_K.SWITCHYARD_KEY,)}),
    _probe("v", {"(?<=_liv)e_": (_K.STRIPE_KEY,)}),
    _probe("secret", {"": (_K.AWS_SECRET_KEY, _K.GENERIC_SECRET)}),
    _probe("w", {"(?<=passw)": (_K.GENERIC_SECRET,)}),
)
# Short texts: one search over the lower-cased text decides there is nothing to look for.
SHORT_TEXT = 2048  # past this, the probes' literal scans beat one scan that checks a set per character
_ANY_ANCHOR = re.compile("|".join(
    [p.regex.pattern for p in _PROBES if p.folded] + ["a(?:kia|sia|iza)"]))  # the "A" probe, lowered
_NONE: frozenset = frozenset()


def kinds_present(text: str, lowered: str) -> frozenset[SecretKind] | set[SecretKind]:
    """The kinds whose anchors occur in text (a superset: a kind listed may still not match)."""
    if len(text) <= SHORT_TEXT and _ANY_ANCHOR.search(lowered) is None:
        return _NONE
    kinds: set[SecretKind] = set()
    for probe in _PROBES:
        haystack = lowered if probe.folded else text
        hit = probe.regex.search(haystack)
        if hit is not None:
            for match in probe.regex.finditer(haystack, hit.start()):
                kinds.update(probe.kinds[match.lastindex - 1])  # type: ignore[operator]  # each alternative is a group
                if probe.every <= kinds:
                    break
    return kinds


class RedactionResult(NamedTuple):
    """The body to forward (unchanged unless mode is redact) and what was found, by kind."""

    body: Any
    counts: dict[str, int]
    mode: RedactionMode = RedactionMode.REDACT
    found: int = 0  # secrets found, all kinds together (the sum of counts)

    @property
    def blocked(self) -> bool:
        return self.found > 0 and self.mode is RedactionMode.BLOCK


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


def redact_prefix(text: str, limit: int) -> str:
    """The first `limit` characters of text, with every secret that reaches into them redacted.

    Redacted before it is cut, with a margin, so a secret straddling the cut is not left half
    there (a private key cut by the margin is still hidden: its pattern runs to the end of text).
    """
    return redact_text(text[:limit + PREFIX_MARGIN])[:limit]


PREFIX_MARGIN = 4096  # longer than any token-shaped secret (JWTs, the first lines of a 4096-bit key)
