"""Atomic request admission against rate limits, concurrency and budgets, in one Redis round trip.

Rates use GCRA (one timestamp per subject and limit, exact under concurrency); concurrency uses
leases that lapse; budgets reserve the worst case and are settled with the actual spend.
See docs/limits.md for the semantics.
"""
from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import StrEnum
from typing import Callable, Sequence

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError

from gateway.ratelimit_scripts import ADMIT, SETTLE  # noqa: F401 (ADMIT is re-exported for tests)

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


class FailurePolicy(StrEnum):
    FAIL_OPEN = "fail_open"  # admit without limits while Redis is unreachable
    FAIL_CLOSED = "fail_closed"  # refuse while Redis is unreachable


class Outcome(StrEnum):
    ADMITTED = "admitted"
    LIMITED = "limited"
    LIMITER_UNAVAILABLE = "limiter_unavailable"


@dataclass(frozen=True, slots=True)
class Limits:
    """One subject's limits; None = unlimited."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent_requests: int | None = None
    monthly_tokens: int | None = None
    monthly_cost_micros: int | None = None  # micro-dollars


@dataclass(frozen=True, slots=True)
class Subject:
    """Who a limit applies to: a tenant, a user, or an API key (ids are opaque strings)."""

    kind: SubjectKind
    id: str
    limits: Limits


@dataclass(frozen=True, slots=True)
class Admission:
    """One request asking to be let in, with its worst case."""

    request_id: str
    tenant_id: str  # every key of the request shares this Redis Cluster hash tag
    subjects: Sequence[Subject]
    prompt_tokens: int  # estimate
    max_tokens: int
    max_cost_micros: int = 0  # worst-case price of prompt + max_tokens, from pricing

    @property
    def worst_case_tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens


@dataclass(frozen=True, slots=True)
class Check:
    """One limit of one subject as sent to the script."""

    subject: SubjectKind
    subject_id: str
    limit_kind: LimitKind
    keys: tuple[str, ...]
    limit: int
    param_us: int  # window, lease or reservation TTL
    amount: int
    ttl_s: int = 0

    def args(self, amount: int | None = None) -> list:
        kind = SCRIPT_KIND[self.limit_kind]
        return [kind, self.limit, self.param_us, self.amount if amount is None else amount, self.ttl_s]


@dataclass(frozen=True, slots=True)
class Reservation:
    """What admission took; hand it back to `settle` exactly once."""

    request_id: str
    checks: tuple[Check, ...]


@dataclass(frozen=True, slots=True)
class Refusal:
    subject: SubjectKind
    subject_id: str
    limit_kind: LimitKind


@dataclass(frozen=True, slots=True)
class Decision:
    """Admitted or not, why, when to retry, and the x-ratelimit-* headers to send."""

    outcome: Outcome
    refused: Refusal | None = None
    retry_after: float | None = None  # seconds
    headers: dict[str, str] = field(default_factory=dict)
    reservation: Reservation | None = None

    @property
    def allowed(self) -> bool:
        return self.outcome == Outcome.ADMITTED


@dataclass(frozen=True, slots=True)
class LimiterConfig:
    """Tunables; failure policies say what happens while Redis cannot be reached."""

    prefix: str = "sy:rl"
    window_seconds: int = 60
    lease_seconds: float = 600  # longer streams renew with `extend`
    reservation_seconds: float = 900
    timeout_seconds: float = 0.2  # the whole admission, so a dead Redis answers inside 250 ms
    rate_failure: FailurePolicy = FailurePolicy.FAIL_OPEN
    budget_failure: FailurePolicy = FailurePolicy.FAIL_CLOSED


def make_client(url: str, timeout_seconds: float = 0.2, max_connections: int = 64) -> aioredis.Redis:
    """A client that gives up fast: no retries, short socket timeouts (the hot path waits).

    The pool blocks (up to the timeout) when all connections are busy: a plain pool raises
    at once, which would turn a traffic burst into "Redis unreachable" and fail open.
    """
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=timeout_seconds,
        socket_timeout=timeout_seconds, socket_connect_timeout=timeout_seconds,
        retry=Retry(NoBackoff(), 0), retry_on_error=[],
    )
    return aioredis.Redis.from_pool(pool)  # closing the client closes its pool


def month_bounds(now: float) -> tuple[str, float]:
    """The UTC month's label (`2026-11`) and the epoch second the next month starts."""
    moment = datetime.fromtimestamp(now, timezone.utc)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return moment.strftime("%Y-%m"), datetime(year, month, 1, tzinfo=timezone.utc).timestamp()


class RateLimiter:
    """Admits requests for several subjects at once; settles their reservations afterwards."""

    def __init__(self, client: aioredis.Redis, config: LimiterConfig | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self._config = config or LimiterConfig()
        self._clock = clock  # only names the budget month; windows run on Redis TIME
        self._sha: dict[str, str] = {}

    async def admit(self, admission: Admission) -> Decision:
        """Check and count every limit of every subject atomically: all or nothing."""
        now = self._clock()
        checks = self._checks(admission, now)
        if not checks:
            return Decision(Outcome.ADMITTED, reservation=Reservation(admission.request_id, ()))
        impossible = next((c for c in checks if c.limit <= 0 and SCRIPT_KIND[c.limit_kind] != "B"), None)
        if impossible:
            return Decision(Outcome.LIMITED, _refusal(impossible))
        try:
            result = await self._run(ADMIT, checks, admission.request_id)
        except (RedisError, OSError, TimeoutError):
            return self._unavailable(checks)
        return self._decision(admission.request_id, checks, result, now)

    async def settle(self, reservation: Reservation, actual_tokens: int,
                     actual_cost_micros: int = 0) -> bool:
        """Record the actual spend, release the rest and the concurrency slot; False if Redis failed."""
        actual = {LimitKind.MONTHLY_TOKENS: actual_tokens, LimitKind.MONTHLY_COST: actual_cost_micros}
        args = []
        for check in reservation.checks:
            if check.limit_kind == LimitKind.TOKENS_PER_MINUTE:
                args.append(check.args(actual_tokens - min(check.amount, check.limit)))
            else:
                args.append(check.args(actual.get(check.limit_kind, 0)))
        return await self._quietly(reservation, args)

    async def extend(self, reservation: Reservation) -> bool:
        """Renew the concurrency leases and budget reservations of a long-running stream."""
        renewable = [c for c in reservation.checks if SCRIPT_KIND[c.limit_kind] in "CB"]
        args = [[SCRIPT_KIND[c.limit_kind].lower(), *c.args()[1:]] for c in renewable]
        return await self._quietly(Reservation(reservation.request_id, tuple(renewable)), args)

    async def _quietly(self, reservation: Reservation, args: list) -> bool:
        # A lost settle is bounded by design: leases and reservations lapse on their own.
        try:
            await self._run(SETTLE, reservation.checks, reservation.request_id, args)
        except (RedisError, OSError, TimeoutError):
            return False
        return True

    def _checks(self, admission: Admission, now: float) -> list[Check]:
        cfg = self._config
        label, next_month = month_bounds(now)
        amounts = {LimitKind.REQUESTS_PER_MINUTE: 1, LimitKind.CONCURRENT_REQUESTS: 1,
                   LimitKind.TOKENS_PER_MINUTE: admission.worst_case_tokens,
                   LimitKind.MONTHLY_TOKENS: admission.worst_case_tokens,
                   LimitKind.MONTHLY_COST: admission.max_cost_micros}
        params = {LimitKind.CONCURRENT_REQUESTS: int(cfg.lease_seconds * MICROS),
                  **{k: cfg.window_seconds * MICROS for k in RATE_KINDS},
                  **{k: int(cfg.reservation_seconds * MICROS) for k in BUDGET_KINDS}}
        budget_ttl = int(next_month - now) + 7 * 86400  # a week's grace for late settles
        checks = []
        for subject in admission.subjects:
            for kind in LimitKind:
                limit = getattr(subject.limits, kind.value)
                if limit is None:
                    continue
                # The {tenant} hash tag keeps one request's keys in one Redis Cluster slot.
                base = f"{cfg.prefix}:{{{admission.tenant_id}}}:{subject.kind}:{subject.id}:{kind}"
                keys = (f"{base}:{label}", f"{base}:{label}:r") if kind in BUDGET_KINDS else (base,)
                checks.append(Check(subject.kind, subject.id, kind, keys, int(limit), params[kind],
                                    amounts[kind], budget_ttl if kind in BUDGET_KINDS else 0))
        return checks

    async def _run(self, script: str, checks: Sequence[Check], request_id: str,
                   args: list | None = None) -> list:
        keys = [key for check in checks for key in check.keys]
        flat = [request_id, len(checks)]
        for check_args in args if args is not None else [c.args() for c in checks]:
            flat += check_args
        async with asyncio.timeout(self._config.timeout_seconds):
            return await self._evalsha(script, keys, flat)

    async def _evalsha(self, script: str, keys: list, args: list) -> list:
        sha = self._sha.get(script) or await self._load(script)
        try:
            return await self._client.evalsha(sha, len(keys), *keys, *args)
        except NoScriptError:  # Redis restarted or SCRIPT FLUSH: load again, once
            return await self._client.evalsha(await self._load(script), len(keys), *keys, *args)

    async def _load(self, script: str) -> str:
        self._sha[script] = await self._client.script_load(script)
        return self._sha[script]

    def _decision(self, request_id: str, checks: list[Check], result: list, now: float) -> Decision:
        allowed, refused_index, retry_us = (int(x) for x in result[:3])
        remaining = [int(x) for x in result[3::2]]
        reset_us = [int(x) for x in result[4::2]]
        headers = _headers(checks, remaining, reset_us)
        if allowed:
            return Decision(Outcome.ADMITTED, headers=headers,
                            reservation=Reservation(request_id, tuple(checks)))
        # -1: a budget refused; it frees up when reservations settle or the month turns.
        retry = month_bounds(now)[1] - now if retry_us == -1 else retry_us / MICROS
        return Decision(Outcome.LIMITED, _refusal(checks[refused_index - 1]), retry, headers)

    def _unavailable(self, checks: list[Check]) -> Decision:
        cfg = self._config
        closed = any(
            (cfg.budget_failure if c.limit_kind in BUDGET_KINDS else cfg.rate_failure)
            == FailurePolicy.FAIL_CLOSED for c in checks
        )
        if closed:
            return Decision(Outcome.LIMITER_UNAVAILABLE, retry_after=1.0)
        return Decision(Outcome.ADMITTED, reservation=None)  # admitted unmetered; nothing to settle


def _refusal(check: Check) -> Refusal:
    return Refusal(check.subject, check.subject_id, check.limit_kind)


def _headers(checks: list[Check], remaining: list[int], reset_us: list[int]) -> dict[str, str]:
    """OpenAI-style x-ratelimit-* headers for the most constrained requests and tokens limits."""
    headers = {}
    for kind, suffix in ((LimitKind.REQUESTS_PER_MINUTE, "requests"), (LimitKind.TOKENS_PER_MINUTE, "tokens")):
        found = [(remaining[i], reset_us[i], c.limit) for i, c in enumerate(checks) if c.limit_kind == kind]
        if found:
            left, reset, limit = min(found, key=lambda f: (f[0] / f[2], f[0]))
            headers[f"x-ratelimit-limit-{suffix}"] = str(limit)
            headers[f"x-ratelimit-remaining-{suffix}"] = str(max(left, 0))
            headers[f"x-ratelimit-reset-{suffix}"] = f"{math.ceil(reset / 1000) / 1000:g}s"
    return headers
