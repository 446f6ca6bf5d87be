"""The kinds of secret redaction finds: one Pattern each (literal anchors, a regex, a validator)."""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Callable

PLACEHOLDER = "[REDACTED:{kind}]"
# No pattern matches fewer characters: the shortest is a Slack token, `xoxb-` and 10 more
# (tests/gateway/test_redaction_probes.py checks every pattern's shortest match).
MIN_SECRET_CHARS = 15


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
