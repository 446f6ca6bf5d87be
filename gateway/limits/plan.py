"""How one set of limit checks becomes one Lua script call, encoded once (`gateway.limits.admission`).

The limit kinds and subject kinds, a `Check` per limit of a subject, and the `Plan`: the RESP of
an ADMIT or SETTLE call with everything but the request's own numbers encoded in advance, plus
the x-ratelimit-* header names its answer fills in.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable, Sequence

from gateway.clients.pipelined_redis import encode_args

MICROS = 1_000_000


class LimitKind(StrEnum):
    REQUESTS_PER_MINUTE = "requests_per_minute"
    TOKENS_PER_MINUTE = "tokens_per_minute"
    CONCURRENT_REQUESTS = "concurrent_requests"
    MONTHLY_TOKENS = "monthly_tokens"
    MONTHLY_COST = "monthly_cost_micros"


RATE_KINDS = (LimitKind.REQUESTS_PER_MINUTE, LimitKind.TOKENS_PER_MINUTE)
BUDGET_KINDS = (LimitKind.MONTHLY_TOKENS, LimitKind.MONTHLY_COST)
SCRIPT_KIND = {LimitKind.CONCURRENT_REQUESTS: "C", **{k: "R" for k in RATE_KINDS},
               **{k: "B" for k in BUDGET_KINDS}}


class SubjectKind(StrEnum):
    TENANT = "tenant"
    USER = "user"
    KEY = "key"


@dataclass(frozen=True, slots=True)
class Check:
    """One limit of one subject as sent to the script."""

    subject: SubjectKind
    subject_id: str
    limit_kind: LimitKind
    keys: tuple[str, ...]
    limit: int
    param_us: int  # window, lease or reservation TTL
    slot: str  # what the request is charged: "1" (itself), "t" (its tokens), "c" (its cost)
    ttl_s: int = 0
    floor: int = 0  # a budget's spend this month per the usage records: it counts at least that

    def args(self, kind: str | None = None) -> list:
        """This check's ARGV values: code (kind and amount slot), limit, param[, budget key TTL, floor]."""
        kind = kind or SCRIPT_KIND[self.limit_kind]
        param = self.param_us
        if kind == "R":  # the script takes GCRA's µs per unit, not the window
            param = -(-param // self.limit) if self.limit > 0 else 0
        code = kind + self.slot
        return [code, self.limit, param, self.ttl_s, self.floor] if kind in "Bb" else [code, self.limit, param]


@dataclass(frozen=True, slots=True, eq=False)
class Plan:
    """The script call of one set of subjects, encoded once: only the request's numbers vary.

    Keys and limits depend on the subjects and the month; budget key TTLs on the time, so a
    plan is rebuilt after `PLAN_SECONDS` (and when the month turns).
    """

    checks: tuple[Check, ...]
    keys: tuple[str, ...]  # the rate checks' keys first (the script reads them with one MGET)
    args: tuple  # ARGV after the request's five values: checks, rate checks, every check's values
    head: bytes  # RESP after `EVALSHA <sha>`: numkeys and KEYS
    keys_resp: bytes  # RESP of KEYS alone (settles sent together list every settlement's keys first)
    tail: bytes  # RESP of `args`
    size: int  # RESP array length of the whole command
    impossible: Check | None  # a rate or concurrency limit of 0 refuses without asking Redis
    limit_headers: tuple  # per check: its x-ratelimit-limit-* header (name, value) if it is a rate
    settlement: "Plan | None" = None  # the checks `settle` touches (requests per minute need nothing)
    expires: float = float("inf")
    prefixes: dict = field(default_factory=dict)  # per script sha: the RESP before the request's values

    @classmethod
    def of(cls, checks: Sequence[Check], expires: float = float("inf"), kinds: Callable | None = None,
           settlement: "Plan | None" = None) -> "Plan":
        """`kinds` maps a check to its script kind (lower case renews: `extend`)."""
        kind_of = [kinds(c) if kinds else SCRIPT_KIND[c.limit_kind] for c in checks]
        rates = sum(kind == "R" for kind in kind_of)
        keys = tuple(key for want in (True, False) for check, kind in zip(checks, kind_of)
                     if (kind == "R") == want for key in check.keys)
        args = (len(checks), rates, *(arg for check, kind in zip(checks, kind_of) for arg in check.args(kind)))
        impossible = next((c for c in checks if c.limit <= 0 and SCRIPT_KIND[c.limit_kind] != "B"), None)
        return cls(tuple(checks), keys, args, encode_args((len(keys), *keys)), encode_args(keys), encode_args(args),
                   3 + len(keys) + len(HEAD_ARGS) + len(args), impossible, _limit_headers(checks), settlement,
                   expires)

    @classmethod
    def for_admission(cls, checks: Sequence[Check], expires: float = float("inf")) -> "Plan":
        """The admission plan, carrying the plan its settle sends."""
        return cls.of(checks, expires, settlement=cls.of(_settled(checks)))

    def argv(self, request_id: str, numbers: tuple[int, int, int, int]) -> list:
        """Every ARGV value (the redis-py client's call)."""
        return [request_id, *numbers, *self.args]

    def packed(self, sha: str, request_id: str, numbers: tuple[int, int, int, int]) -> bytes:
        """The whole EVALSHA command in RESP (the pipelined client's call)."""
        prefix = self.prefixes.get(sha)
        if prefix is None:
            prefix = self.prefixes[sha] = b"*%d\r\n$7\r\nEVALSHA\r\n$%d\r\n%s\r\n%s" % (
                self.size, len(sha), sha.encode(), self.head)
        rid = request_id.encode()
        a, b, c, d = numbers
        return b"%s$%d\r\n%s\r\n%s%s%s%s%s" % (prefix, len(rid), rid, _bulk(a), _bulk(b), _bulk(c), _bulk(d),
                                                self.tail)

    def values(self, request_id: str, numbers: tuple[int, int, int, int]) -> bytes:
        """RESP of this call's ARGV alone (`packed` without its head: settles sent together)."""
        rid = request_id.encode()
        a, b, c, d = numbers
        return b"$%d\r\n%s\r\n%s%s%s%s%s" % (len(rid), rid, _bulk(a), _bulk(b), _bulk(c), _bulk(d), self.tail)


_ZERO = b"$1\r\n0\r\n"


def _bulk(number: int) -> bytes:
    """One integer as a RESP bulk string (most of a request's numbers are 0)."""
    if not number:
        return _ZERO
    text = b"%d" % number
    return b"$%d\r\n%s\r\n" % (len(text), text)


def _packed_together(sha: str, settlements: list[tuple]) -> bytes:
    """One SETTLE_TOGETHER call for (plan, request id, numbers)s: every one's KEYS, then every one's ARGV."""
    size = 3 + sum(plan.size - 3 for plan, _, _ in settlements)
    head = b"*%d\r\n$7\r\nEVALSHA\r\n$%d\r\n%s\r\n%s" % (
        size, len(sha), sha.encode(), _bulk(sum(len(plan.keys) for plan, _, _ in settlements)))
    return b"".join([head, *[plan.keys_resp for plan, _, _ in settlements],
                     *[plan.values(request_id, numbers) for plan, request_id, numbers in settlements]])


def _settled(checks: Sequence[Check]) -> list[Check]:
    """The checks a settle touches: requests per minute were counted for good at admission."""
    return [c for c in checks if c.limit_kind != LimitKind.REQUESTS_PER_MINUTE]


HEADER_NAMES = {kind: (b"x-ratelimit-limit-" + suffix, b"x-ratelimit-remaining-" + suffix,
                       b"x-ratelimit-reset-" + suffix)
                for kind, suffix in ((LimitKind.REQUESTS_PER_MINUTE, b"requests"),
                                     (LimitKind.TOKENS_PER_MINUTE, b"tokens"))}


def _limit_headers(checks: Sequence[Check]) -> tuple:
    return tuple((HEADER_NAMES[c.limit_kind][0], b"%d" % c.limit) if c.limit_kind in HEADER_NAMES else None
                 for c in checks)


HEAD_ARGS = ("request id", "reserved tokens", "reserved cost", "actual tokens", "actual cost")
