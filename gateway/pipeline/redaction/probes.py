"""Which kinds of secret may occur in a text: a few scans for the patterns' anchors, led by rare literals."""
from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.pipeline.redaction.patterns import SecretKind


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
