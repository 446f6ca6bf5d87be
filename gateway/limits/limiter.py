"""The seam between a request and `gateway.limits.admission`: admit with a reservation, settle after.

Subjects come from the snapshot's quota policies: the tenant's, the key's and the user's (a
person without a policy of their own still gets the default per-user rate). Money budgets
are enforced from the usage app's budget state (cost comes from GPU time, not a per-token
price), which the snapshot carries per tenant; `max_cost_micros` is therefore 0 here.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field

from gateway import errors
from gateway.config.snapshot import KeyInfo, Snapshot
from gateway.limits import budget_floors
from gateway.limits.admission import Admission as LimitRequest
from gateway.limits.admission import (
    LimiterConfig,
    Limits,
    Outcome,
    RateLimiter,
    Reservation,
    Subject,
    SubjectKind,
    month_bounds,
)
from gateway.limits.budget_floors import BudgetFloors, load_budget_floors

log = logging.getLogger("gateway.limits")
MAX_CACHED_KEYS = 10_000
# Requests running longer than this have their concurrency leases (600 s) and budget reservations
# (900 s) renewed, once per this long: a long stream neither frees its slot nor hands back its
# reservation while it still runs (which would let others spend what it is about to spend).
RENEW_AFTER_SECONDS = 120.0
SUBJECT_KINDS = {"tenant": SubjectKind.TENANT, "api_key": SubjectKind.KEY, "user": SubjectKind.USER}


@dataclass(slots=True)
class Admission:
    """A granted request: the headers to echo and the reservation to settle (None = unmetered)."""

    headers: list = field(default_factory=list)
    reservation: Reservation | None = None
    token_cap: int | None = None


class Limiter:
    """One `RateLimiter` per gateway; turns decisions into admissions or 429/503 errors."""

    def __init__(self, client, metrics, *, prefix: str | None = None):
        # None until `scope` names the keys (the install id comes from the database), and for ever
        # without a Redis: then every admission is refused (`_cannot_count`), never let through uncounted.
        self._client = client
        self._limiter: RateLimiter | None = None
        if prefix is not None:
            self.scope(prefix)
        self._metrics = metrics
        self._subjects: dict[tuple, tuple[Subject, ...]] = {}  # per key, for `_subjects_of`'s snapshot
        self._subjects_of: tuple | None = None  # (snapshot, floors) the cached subjects were built from
        self.floors = BudgetFloors()  # what the usage records say budgeted subjects spent this month
        self._running: dict[int, list] = {}  # id(admission) -> [admitted or last renewed (monotonic), admission]

    async def admit(self, *, key: KeyInfo, snapshot: Snapshot, request_id: str, prompt_tokens: int,
                    max_tokens: int) -> Admission:
        """Count the request against every limit at once, or raise the refusal."""
        limiter = self._limiter
        if limiter is None:
            self._metrics.limit_rejections.labels(str(key.tenant_id), "limiter_unavailable").inc()
            raise self._cannot_count()
        request = LimitRequest(request_id, str(key.tenant_id), self._subjects_for(snapshot, key),
                               prompt_tokens=prompt_tokens, max_tokens=max_tokens)
        decision = await limiter.admit(request)
        headers = list(decision.header_list)
        if decision.outcome == Outcome.LIMITED:
            refused = decision.refused.limit_kind  # type: ignore[union-attr]  # a LIMITED decision names its refusal
            self._metrics.limit_rejections.labels(str(key.tenant_id), refused).inc()
            raise limited(decision, headers)
        if decision.outcome == Outcome.LIMITER_UNAVAILABLE:
            self._metrics.limit_rejections.labels(str(key.tenant_id), "limiter_unavailable").inc()
            raise errors.GatewayError(503, "limits_unavailable", "Limits cannot be checked right now; retry shortly.",
                                      [(b"retry-after", b"1")])
        admission = Admission(headers=headers, reservation=decision.reservation)
        if decision.reservation is not None:
            self._running[id(admission)] = [time.monotonic(), admission]
        return admission

    def scope(self, prefix: str) -> None:
        """Count under `prefix` (`sy:<install id>:rl`, controlplane/redis_keys.py) from now on."""
        if self._client is not None:
            self._limiter = RateLimiter(self._client, LimiterConfig(prefix=prefix))

    @property
    def scoped(self) -> bool:
        return self._limiter is not None

    def _cannot_count(self) -> errors.GatewayError:
        if self._client is None:
            return errors.redis_not_configured()
        return errors.database_unavailable()  # the install id is not known yet: the database has not answered

    def _subjects_for(self, snapshot: Snapshot, key: KeyInfo) -> tuple[Subject, ...]:
        """`subjects_for`, computed once per key, snapshot and floors (both are immutable)."""
        made_of = self._subjects_of
        if made_of is None or made_of[0] is not snapshot or made_of[1] is not self.floors \
                or len(self._subjects) >= MAX_CACHED_KEYS:
            self._subjects.clear()
            self._subjects_of = (snapshot, self.floors)
        cache_key = (key.id, key.tenant_id, key.user_id)
        subjects = self._subjects.get(cache_key)
        if subjects is None:
            subjects = self._subjects[cache_key] = tuple(subjects_for(snapshot, key, self.floors))
        return subjects

    async def refresh_floors(self, db) -> None:
        """Load the budget floors from the usage records (in a database thread)."""
        floors = await db.run(load_budget_floors)
        if floors != self.floors:  # unchanged floors keep the cached subjects (and their plans)
            self.floors = floors

    async def maintain(self, db) -> None:
        """Every `budget_floors.REFRESH_SECONDS`: reload the floors (keeping the last ones while the
        database is away: within a month they only grow, so old ones are still a floor), and renew
        what requests running for long hold."""
        while True:
            await asyncio.sleep(budget_floors.REFRESH_SECONDS)
            try:
                await self.refresh_floors(db)
            except Exception:
                log.warning("budget floors not refreshed; keeping the previous ones", exc_info=True)
            await self.renew_long_requests()

    async def renew_long_requests(self, after: float | None = None) -> int:
        """Renew the leases and reservations of requests admitted (or renewed) `after` s ago or more."""
        now, after = time.monotonic(), RENEW_AFTER_SECONDS if after is None else after
        due = [entry for entry in self._running.values() if now - entry[0] >= after]
        for entry in due:
            entry[0] = now
        limiter = self._limiter
        if limiter is not None:  # reservations exist only where a limiter admitted them
            await asyncio.gather(*(limiter.extend(entry[1].reservation) for entry in due
                                   if entry[1].reservation is not None), return_exceptions=True)
        return len(due)

    async def settle(self, admission: Admission, *, used_tokens: int) -> None:
        """Hand the reservation back with the actual tokens (also 0 for failed requests)."""
        self._running.pop(id(admission), None)
        if admission.reservation is not None and self._limiter is not None:
            await self._limiter.settle(admission.reservation, used_tokens)
            admission.reservation = None

    def settle_soon(self, admission: Admission, *, used_tokens: int) -> None:
        """`settle` without waiting for Redis (after the answer went out; see RateLimiter.settle_soon)."""
        self._running.pop(id(admission), None)
        if admission.reservation is not None and self._limiter is not None:
            self._limiter.settle_soon(admission.reservation, used_tokens)
            admission.reservation = None


def subjects_for(snapshot: Snapshot, key: KeyInfo, floors: BudgetFloors | None = None) -> list[Subject]:
    """Every level that governs the key, each enforced on its own; budgets count at least their floor."""
    floors = floors or BudgetFloors()
    subjects = [Subject(SUBJECT_KINDS[p.level], str(p.subject_id), _limits(p, floors.of(p.level, key.tenant_id,
                                                                                    p.subject_id)))
                for p in snapshot.policies_for(key)]
    user_rpm = snapshot.user_rpm(key)
    if user_rpm is not None and not any(s.kind == SubjectKind.USER for s in subjects):
        subjects.append(Subject(SubjectKind.USER, str(key.user_id), Limits(requests_per_minute=user_rpm)))
    elif user_rpm is not None:  # the user's own policy without a rate still gets the default rate
        subjects = [_with_user_rpm(s, user_rpm) if s.kind == SubjectKind.USER else s for s in subjects]
    return subjects


def _limits(policy, floor: tuple[str, int] | None = None) -> Limits:
    return Limits(requests_per_minute=policy.requests_per_minute, tokens_per_minute=policy.tokens_per_minute,
                  concurrent_requests=policy.max_concurrent_requests, monthly_tokens=policy.monthly_token_budget,
                  monthly_tokens_floor=floor if policy.monthly_token_budget is not None else None)


def _with_user_rpm(subject: Subject, rpm: int) -> Subject:
    limits = subject.limits
    if limits.requests_per_minute is not None:
        return subject
    return Subject(subject.kind, subject.id, Limits(rpm, limits.tokens_per_minute, limits.concurrent_requests,
                                                    limits.monthly_tokens,
                                                    monthly_tokens_floor=limits.monthly_tokens_floor))


def limited(decision, headers: list) -> errors.GatewayError:
    """429 naming the limit, with Retry-After and the x-ratelimit-* headers."""
    refused = decision.refused
    retry = max(1, math.ceil(decision.retry_after or 1))
    message = f"Rate limit reached: {refused.limit_kind} of this {refused.subject}. Retry after {retry} s."
    code = "budget_exceeded" if refused.limit_kind.startswith("monthly") else "rate_limit_exceeded"
    return errors.GatewayError(429, code, message, [(b"retry-after", str(retry).encode()), *headers])


def budget_name(reason: str) -> str:
    """The quota field a usage-app reason is about (its wording: `usage.budgets.over_reason`)."""
    return "monthly_token_budget" if "token" in reason.lower() else "monthly_budget_usd"


def over_budget(reason: str, now: float) -> errors.GatewayError:
    """429 for a tenant the usage app marked over its monthly budget; room returns next month."""
    retry = max(1, math.ceil(month_bounds(now)[1] - now))
    message = f"Monthly budget exhausted ({budget_name(reason)}): {reason or 'over budget'}."
    return errors.GatewayError(429, "budget_exceeded", message, [(b"retry-after", str(retry).encode())])
