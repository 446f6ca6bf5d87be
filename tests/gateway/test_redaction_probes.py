"""The probes that decide which patterns run must see every pattern's anchors, in any surrounding."""
import re
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.pipeline.redaction import (
    _SECRET_NAME,
    GENERIC_ASSIGNMENT,
    PATTERNS,
    SHORT_TEXT,
    _keyword_matches,
    kinds_present,
    redact_text,
)

ANCHORS = [(pattern, anchor) for pattern in PATTERNS for anchor in pattern.anchors]


def kinds(text):
    return kinds_present(text, text.lower())


def anchored_kinds(text):
    """What the probes must report: each pattern whose anchor occurs (lower-cased for folded ones)."""
    lowered = text.lower()
    return {p.kind for p, anchor in ANCHORS if anchor in (lowered if p.folded else text)}


def test_every_anchor_alone_short_and_long_is_seen():
    padding = "x = 1\n" * (SHORT_TEXT // 6 + 1)
    for pattern, anchor in ANCHORS:
        variants = [anchor, f"({anchor})", padding + anchor, anchor + padding]
        if pattern.folded:
            variants += [anchor.upper(), padding + anchor.title()]
        for text in variants:
            assert pattern.kind in kinds(text), (pattern.kind, text[:40])


def test_kelvin_sign_lowers_into_a_keyword_and_is_seen():
    assert "generic_secret" in kinds("api_\u212aey = 1")  # "K".lower() == "k"


def test_plain_code_needs_no_pattern():
    assert not kinds("def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1)\n" * 50)


FRAGMENTS = sorted({anchor for _, anchor in ANCHORS} | {"AK", "IA", "_", "-", "k", "J", "e", "y", " ", "\n", "sy",
                                                         "lIVe", "PASSW", "Token", "\u212a", "\u0130"})


@given(st.lists(st.sampled_from(FRAGMENTS), max_size=12), st.booleans())
def test_probes_see_whatever_the_anchors_see(pieces, long):
    text = "".join(pieces) + ("." * SHORT_TEXT if long else "")
    assert anchored_kinds(text) <= set(kinds(text))


@given(st.lists(st.sampled_from(FRAGMENTS + ["AKIAQ3EGRTX5ZBN7W4KD", "ghp_" + "Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Jh0Gf9EdCbA1234",
                                             " = 'Xk9mQ2vL8pZr4Tw7'"]), max_size=10))
def test_text_without_anchors_is_returned_as_the_same_object(pieces):
    text = "".join(pieces)
    counts = Counter()
    out = redact_text(text, counts)
    assert (out is text) == (not counts)


NAME_PIECES = ["secret", "client_secret", "token", "passwd", "password", "passw", "api_key", "apikey", "privatekey",
               "private_key", "accesskey", "access_key", "Token", "SECRET", "_", "x", "-", ".", " ", " = ", ": ",
               "=>", "'", '"', "Xk9mQ2vL8pZr4Tw7", "aB3dE5gH7jK9mN1p", "\n", "\u212a"]


def reference_generic(text):
    """The generic rule as first written: every non-overlapping keyword hit in the lower-cased text."""
    lowered, resume, spans = text.lower(), 0, []
    if len(lowered) != len(text):
        return [m.span() for m in GENERIC_ASSIGNMENT.finditer(text)]
    for hit in re.compile(_SECRET_NAME).finditer(lowered):
        match = hit.start() >= resume and GENERIC_ASSIGNMENT.match(text, hit.start())
        if match:
            resume = match.end()
            spans.append(match.span("qvalue") if match.group("qvalue") else match.span("value"))
    return spans


NAMES = [n for n in NAME_PIECES[:12] if n != "passw"] + ["db_password", "GITHUB_TOKEN", "x_access_key_id", "secretoken",
                                                         "Client_Secret"]
ASSIGNMENTS = st.tuples(st.sampled_from(NAMES + ["name", ""]), st.sampled_from([" = ", ": ", "=>", "=", " := ", " "]),
                        st.sampled_from(["'Xk9mQ2vL8pZr4Tw7'", "aB3dE5gH7jK9mN1p", "short", "os.environ['X']", ""]))


@pytest.mark.parametrize("name", NAMES)
def test_generic_rule_finds_each_name(name):
    text = f"{name} = 'Xk9mQ2vL8pZr4Tw7'"
    assert [m.span("qvalue") for m in _keyword_matches(text, text.lower())] == reference_generic(text) != []


@given(st.lists(st.one_of(st.sampled_from(NAME_PIECES), ASSIGNMENTS.map("".join)), max_size=14))
def test_generic_rule_finds_the_same_values_as_a_keyword_scan(pieces):
    text = "".join(pieces)
    spans = [m.span("qvalue") if m.group("qvalue") else m.span("value") for m in _keyword_matches(text, text.lower())]
    assert spans == reference_generic(text)


def test_no_pattern_can_match_a_text_shorter_than_min_secret_chars():
    # redact_text skips shorter texts (roles, part types, most field names) without looking.
    from re import _parser

    from gateway.pipeline.redaction import MIN_SECRET_CHARS

    shortest = {p.kind: _parser.parse(p.regex.pattern, p.regex.flags).getwidth()[0] for p in PATTERNS}
    assert min(shortest.values()) == MIN_SECRET_CHARS, shortest
    assert redact_text("xoxb-1234567a9Z") == "[REDACTED:slack_token]"  # exactly that long: still found
