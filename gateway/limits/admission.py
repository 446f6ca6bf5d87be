"""Atomic request admission against rate limits, concurrency and budgets, in one Redis round trip.

Rates use GCRA (one timestamp per subject and limit, exact under concurrency); concurrency uses
leases that lapse; budgets reserve the worst case and are settled with the actual spend.
See docs/limits.md for the semantics.
"""
from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any, Callable, Sequence

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError

from gateway.limits.plan import (  # noqa: F401 (the limiter's vocabulary, re-exported for callers and tests)
    BUDGET_KINDS,
    HEADER_NAMES,
    MICROS,
    RATE_KINDS,
    SCRIPT_KIND,
    Check,
    LimitKind,
    Plan,
    SubjectKind,
    _packed_together,
    _settled,
)
from gateway.limits.scripts import ADMIT, ADMIT_TOGETHER, SETTLE, SETTLE_TOGETHER  # noqa: F401 (re-exported for tests)


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
    # (month label, tokens): what the usage records say the subject used that month. Its token
    # budget counts at least that, so a Redis that lost the budget's hash (or a settle) still
    # refuses an exhausted subject (docs/limits.md, "When Redis loses budgets").
    monthly_tokens_floor: tuple[str, int] | None = None


@dataclass(frozen=True, slots=True)
class Subject:
    """Who a limit applies to: a tenant, a user, or an API key (ids are opaque strings)."""

    kind: SubjectKind
    id: str
    limits: Limits


# Admission, Reservation and Decision are made per request, so not frozen (a frozen dataclass sets
# each field through object.__setattr__). Treat them as read-only all the same.
@dataclass(slots=True)
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


PLAN_SECONDS = 60.0  # budget keys' TTLs may be this much too long: they live a week past the month anyway
MAX_PLANS = 10_000
MAX_SETTLES_TOGETHER = 200  # per script call (its KEYS and ARGV stay well within Lua's stack)
MAX_ADMISSIONS_TOGETHER = 200


@dataclass(slots=True)
class Reservation:
    """What admission took; hand it back to `settle` exactly once."""

    request_id: str
    checks: tuple[Check, ...]
    tokens: int = 0  # the worst case reserved
    cost_micros: int = 0
    plan: Plan | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Refusal:
    subject: SubjectKind
    subject_id: str
    limit_kind: LimitKind


@dataclass(slots=True)
class Decision:
    """Admitted or not, why, when to retry, and the x-ratelimit-* headers to send."""

    outcome: Outcome
    refused: Refusal | None = None
    retry_after: float | None = None  # seconds
    header_list: tuple = ()  # (name, value) as bytes, as they are sent
    reservation: Reservation | None = None

    @property
    def allowed(self) -> bool:
        return self.outcome == Outcome.ADMITTED

    @property
    def headers(self) -> dict[str, str]:
        return {name.decode(): value.decode() for name, value in self.header_list}


@dataclass(frozen=True, slots=True)
class LimiterConfig:
    """Tunables; failure policies say what happens while Redis cannot be reached."""

    prefix: str  # `sy:<install id>:rl` (controlplane/redis_keys.py): installs sharing a Redis never share a key
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

    def __init__(self, client: aioredis.Redis, config: LimiterConfig,
                 clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self._config = config
        self._clock = clock  # only names the budget month; windows run on Redis TIME
        self._sha: dict[str, str] = {}
        self._background: set[asyncio.Task] = set()  # settles in flight without a waiter
        self._plans: dict[tuple, Plan] = {}
        self._recent: dict[int, tuple] = {}  # id(subjects tuple) -> (it, tenant, plan): no hashing per request
        # The pipelined client's calls (gateway.clients.pipelined_redis.PipelinedRedis); None on a
        # redis-py client.
        self._send_packed = getattr(client, "send_packed", None)
        self._send_quiet = getattr(client, "send_quiet", None)
        self._send_quiet_later = getattr(client, "send_quiet_later", None)
        self._queued: list | None = None  # the settlements of the settle call still open (`settle_soon`)
        self._send_later: Any = getattr(client, "send_later", None)
        self._expire_at: Any = getattr(client, "expire_at", None)
        self._admitting: tuple | None = None  # ([(plan, request id, numbers)], [future]) of the open admit call

    async def admit(self, admission: Admission) -> Decision:
        """Check and count every limit of every subject atomically: all or nothing."""
        now = self._clock()
        plan = self._plan(admission, now)
        if not plan.checks:
            return Decision(Outcome.ADMITTED, reservation=Reservation(admission.request_id, ()))
        if plan.impossible:
            return Decision(Outcome.LIMITED, _refusal(plan.impossible))
        numbers = (admission.worst_case_tokens, admission.max_cost_micros, 0, 0)
        try:
            if self._send_later is not None and ADMIT_TOGETHER in self._sha:
                deadline = asyncio.get_running_loop().time() + self._config.timeout_seconds
                try:
                    result = await self._admit_soon(plan, admission.request_id, numbers, deadline)
                except NoScriptError:  # Redis restarted or SCRIPT FLUSH: this one on its own, loaded again
                    result = await self._run(ADMIT, plan, admission.request_id, numbers, deadline)
            else:
                result = await self._run(ADMIT, plan, admission.request_id, numbers)
        except (RedisError, OSError, TimeoutError):
            return self._unavailable(plan.checks)
        return self._decision(admission, plan, result, now)

    def _admit_soon(self, plan: Plan, request_id: str, numbers: tuple, deadline: float) -> asyncio.Future:
        """The future of this admission's answer, from the admit call this event-loop iteration sends.

        Like the settles (`settle_soon`), the admissions of one iteration leave as one script call:
        the first takes its place in the connection's order, those after it join it until it is
        written (or until a settle is queued: a settle queued before an admission runs before it).
        Several go to ADMIT_TOGETHER, which decides them in order as one ADMIT call each would;
        a lone one to ADMIT. Each keeps its own deadline.
        """
        future = asyncio.get_running_loop().create_future()
        batch = self._admitting
        if batch is None:
            batch = self._admitting = ([(plan, request_id, numbers)], [future])
            self._send_later(functools.partial(self._packed_admissions, (self._sha[ADMIT], self._sha[ADMIT_TOGETHER]),
                                               batch), functools.partial(self._admitted, batch))
        else:
            batch[0].append((plan, request_id, numbers))
            batch[1].append(future)
            if len(batch[1]) >= MAX_ADMISSIONS_TOGETHER:
                self._admitting = None
        if not future.done():
            self._expire_at(future, deadline)
        return future

    def _packed_admissions(self, shas: tuple[str, str], batch: tuple) -> bytes:
        if self._admitting is batch:  # written now: later admissions start another call
            self._admitting = None
        return _packed_call(shas, batch[0])

    def _admitted(self, batch: tuple, reply) -> None:
        """Each admission's future gets its 9 integers, or the call's error."""
        if self._admitting is batch:  # never written (Redis unreachable): later admissions start anew
            self._admitting = None
        futures = batch[1]
        if isinstance(reply, Exception):
            if isinstance(reply, NoScriptError):  # each admission sends itself again (`admit`)
                self._sha.pop(ADMIT, None)
                self._sha.pop(ADMIT_TOGETHER, None)
            for future in futures:
                if not future.done():
                    future.set_exception(reply)
        elif len(futures) == 1:
            if not futures[0].done():
                futures[0].set_result(reply)
        else:
            for at, future in enumerate(futures):
                if not future.done():
                    future.set_result(reply[9 * at:9 * at + 9])

    async def settle(self, reservation: Reservation, actual_tokens: int,
                     actual_cost_micros: int = 0) -> bool:
        """Record the actual spend, release the rest and the concurrency slot; False if Redis failed."""
        settlement = self._settlement(reservation, actual_tokens, actual_cost_micros)
        if not settlement[0].checks:  # only requests per minute: nothing to give back
            return True
        return await self._quietly(*settlement)

    def settle_soon(self, reservation: Reservation, actual_tokens: int, actual_cost_micros: int = 0) -> None:
        """`settle` without waiting for Redis's answer (the gateway's request path).

        On a pipelined client (`gateway.clients.pipelined_redis.PipelinedRedis`) the script is queued at
        once, so Redis runs it before any admission this process sends later: a client that gets its
        answer and sends again at once finds its concurrency slot free. Another gateway process
        may admit that next request in the moment before the queued settle is written (one
        event-loop iteration): then the old lease still counts there — the accepted race. A
        failed settle is dropped, like `settle`'s False.

        The settles of one event-loop iteration leave as one script call: the first takes its
        place in the connection's order, those after it join it until it is written. (Moving a
        settle ahead of admissions queued before it but not yet written frees nothing that the
        same settle called a moment earlier would not.) Redis's work per call (its arguments, the
        script's set-up, reading and writing the same rate keys and lease sets) is then shared.
        """
        settlement = self._settlement(reservation, actual_tokens, actual_cost_micros)
        if not settlement[0].checks:
            return
        queued = self._queued
        if queued is not None:  # joins a settle call queued before any admission still open
            queued.append(settlement)
            if len(queued) >= MAX_SETTLES_TOGETHER:
                self._queued = None
            return
        shas, send = (self._sha.get(SETTLE), self._sha.get(SETTLE_TOGETHER)), self._send_quiet_later
        self._admitting = None  # admissions after this settle go after it
        if None in shas or send is None:  # first use, or a redis-py client: settle in a task
            self._in_background(self._quietly(*settlement))
            return
        queued = self._queued = [settlement]
        send(functools.partial(self._packed_queued, shas, queued), functools.partial(self._settled_soon, queued))

    def _packed_queued(self, shas: tuple, queued: list) -> bytes:
        if self._queued is queued:  # written now: later settles start another call
            self._queued = None
        return _packed_call(shas, queued)

    def _settled_soon(self, settlements: list, error: Exception) -> None:
        if self._queued is settlements:  # never written (Redis unreachable): later settles start anew
            self._queued = None
        if isinstance(error, NoScriptError):  # Redis restarted: load the script again and send once more
            self._sha.pop(SETTLE, None)
            self._sha.pop(SETTLE_TOGETHER, None)
            for settlement in settlements:
                self._in_background(self._quietly(*settlement))

    def _in_background(self, coroutine) -> None:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)  # a reference, so the task is not collected while it runs
        task.add_done_callback(self._background.discard)

    @staticmethod
    def _settlement(reservation: Reservation, actual_tokens: int, actual_cost_micros: int) -> tuple:
        plan = reservation.plan.settlement if reservation.plan else Plan.of(_settled(reservation.checks))
        numbers = (reservation.tokens, reservation.cost_micros, actual_tokens, actual_cost_micros)
        return plan, reservation.request_id, numbers

    async def extend(self, reservation: Reservation) -> bool:
        """Renew the concurrency leases and budget reservations of a long-running stream."""
        renewable = [c for c in reservation.checks if SCRIPT_KIND[c.limit_kind] in "CB"]
        if not renewable:  # only rates: nothing lapses
            return True
        plan = Plan.of(renewable, kinds=lambda c: SCRIPT_KIND[c.limit_kind].lower())
        return await self._quietly(plan, reservation.request_id, (0, 0, 0, 0))

    async def _quietly(self, plan: Plan, request_id: str, numbers: tuple) -> bool:
        # A lost settle is bounded by design: leases and reservations lapse on their own.
        self._admitting = None  # admissions after this settle go after it
        try:
            await self._run(SETTLE, plan, request_id, numbers)
        except (RedisError, OSError, TimeoutError):
            return False
        return True

    def _plan(self, admission: Admission, now: float) -> Plan:
        """The cached plan of these subjects, rebuilt when stale (see `Plan`)."""
        subjects = admission.subjects
        # The gateway passes the same tuple for every request of a key: found by identity, which
        # skips hashing every subject's limits (the tuple is kept, so its id is not reused).
        recent = self._recent.get(id(subjects))
        if recent is not None and recent[0] is subjects and recent[1] == admission.tenant_id \
                and now < recent[2].expires:
            return recent[2]
        cache_key = (admission.tenant_id, tuple(subjects))
        plan = self._plans.get(cache_key)
        if plan is None or now >= plan.expires:
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
                self._recent.clear()
            label, next_month = month_bounds(now)
            plan = self._plans[cache_key] = Plan.for_admission(
                self._checks(admission, label, int(next_month - now)), min(now + PLAN_SECONDS, next_month))
        if type(subjects) is tuple:  # immutable (of frozen subjects): safe to know by identity
            if len(self._recent) >= MAX_PLANS:
                self._recent.clear()
            self._recent[id(subjects)] = (subjects, admission.tenant_id, plan)
        return plan

    def _checks(self, admission: Admission, label: str, month_left: int) -> list[Check]:
        cfg = self._config
        slots = {LimitKind.REQUESTS_PER_MINUTE: "1", LimitKind.CONCURRENT_REQUESTS: "1",
                 LimitKind.TOKENS_PER_MINUTE: "t", LimitKind.MONTHLY_TOKENS: "t", LimitKind.MONTHLY_COST: "c"}
        params = {LimitKind.CONCURRENT_REQUESTS: int(cfg.lease_seconds * MICROS),
                  **{k: cfg.window_seconds * MICROS for k in RATE_KINDS},
                  **{k: int(cfg.reservation_seconds * MICROS) for k in BUDGET_KINDS}}
        budget_ttl = month_left + 7 * 86400  # a week's grace for late settles
        checks = []
        for subject in admission.subjects:
            month_floor = subject.limits.monthly_tokens_floor
            floor = month_floor[1] if month_floor is not None and month_floor[0] == label else 0  # its month only
            for kind in LimitKind:
                limit = getattr(subject.limits, kind.value)
                if limit is None:
                    continue
                # The {tenant} hash tag keeps one request's keys in one Redis Cluster slot.
                base = f"{cfg.prefix}:{{{admission.tenant_id}}}:{subject.kind}:{subject.id}:{kind}"
                keys = (f"{base}:{label}", f"{base}:{label}:r") if kind in BUDGET_KINDS else (base,)
                checks.append(Check(subject.kind, subject.id, kind, keys, int(limit), params[kind],
                                    slots[kind], budget_ttl if kind in BUDGET_KINDS else 0,
                                    floor if kind == LimitKind.MONTHLY_TOKENS else 0))
        return checks

    async def _run(self, script: str, plan: Plan, request_id: str, numbers: tuple,
                   deadline: float | None = None) -> list:
        sha, send = self._sha.get(script), self._send_packed
        if deadline is None:
            deadline = asyncio.get_running_loop().time() + self._config.timeout_seconds
        if sha is not None and send is not None:  # the usual case: one command, the client keeps the deadline
            try:
                return await send(plan.packed(sha, request_id, numbers), deadline)
            except NoScriptError:  # Redis restarted or SCRIPT FLUSH: load again, once
                async with asyncio.timeout_at(deadline):
                    return await self._evalsha(await self._load(script), plan, request_id, numbers)
        async with asyncio.timeout_at(deadline):
            sha = sha or await self._load(script)
            try:
                return await self._evalsha(sha, plan, request_id, numbers)
            except NoScriptError:  # Redis restarted or SCRIPT FLUSH: load again, once
                return await self._evalsha(await self._load(script), plan, request_id, numbers)

    def _evalsha(self, sha: str, plan: Plan, request_id: str, numbers: tuple):
        send = self._send_packed
        if send is not None:
            return send(plan.packed(sha, request_id, numbers))
        return self._client.evalsha(sha, len(plan.keys), *plan.keys, *plan.argv(request_id, numbers))

    async def _load(self, script: str) -> str:
        # Every script at once: `settle_soon` and `_admit_soon` then send without a round trip of their own.
        everything = (ADMIT, ADMIT_TOGETHER, SETTLE, SETTLE_TOGETHER)
        scripts = [script, *(s for s in everything if s != script and s not in self._sha)]
        for text, sha in zip(scripts, await asyncio.gather(*(self._client.script_load(s) for s in scripts))):
            self._sha[text] = sha
        return self._sha[script]

    def _decision(self, admission: Admission, plan: Plan, result: list, now: float) -> Decision:
        allowed, refused_index, retry_us = result[0], result[1], result[2]
        headers = _headers(plan, result)
        if allowed:
            return Decision(Outcome.ADMITTED, header_list=headers, reservation=Reservation(
                admission.request_id, plan.checks, admission.worst_case_tokens, admission.max_cost_micros, plan))
        # -1: a budget refused; it frees up when reservations settle or the month turns.
        retry = month_bounds(now)[1] - now if retry_us == -1 else retry_us / MICROS
        return Decision(Outcome.LIMITED, _refusal(plan.checks[refused_index - 1]), retry, headers)

    def _unavailable(self, checks: Sequence[Check]) -> Decision:
        cfg = self._config
        closed = any(
            (cfg.budget_failure if c.limit_kind in BUDGET_KINDS else cfg.rate_failure)
            == FailurePolicy.FAIL_CLOSED for c in checks
        )
        if closed:
            return Decision(Outcome.LIMITER_UNAVAILABLE, retry_after=1.0)
        return Decision(Outcome.ADMITTED, reservation=None)  # admitted unmetered; nothing to settle


def _packed_call(shas: tuple[str, str], calls: list) -> bytes:
    """One script call for (plan, request id, numbers)s: a lone one by the one-request script
    (`shas[0]`), several by the script that takes them together (`shas[1]`)."""
    if len(calls) == 1:
        plan, request_id, numbers = calls[0]
        return plan.packed(shas[0], request_id, numbers)
    return _packed_together(shas[1], calls)


def _refusal(check: Check) -> Refusal:
    return Refusal(check.subject, check.subject_id, check.limit_kind)


def _headers(plan: Plan, result: list) -> tuple:
    """OpenAI-style x-ratelimit-* headers for the most constrained requests and tokens limits.

    `result` is the admit script's answer: after three values, per kind (requests, tokens) the
    binding check's number (0: none), its remaining count (at least 0) and reset in ms.
    """
    requests, tokens = result[3], result[6]
    if not requests and not tokens:
        return ()
    headers: list = []
    if requests:
        headers += (plan.limit_headers[requests - 1], (REMAINING_REQUESTS, b"%d" % result[4]),
                    (RESET_REQUESTS, b"%gs" % (result[5] / 1000)))
    if tokens:
        headers += (plan.limit_headers[tokens - 1], (REMAINING_TOKENS, b"%d" % result[7]),
                    (RESET_TOKENS, b"%gs" % (result[8] / 1000)))
    return tuple(headers)


_, REMAINING_REQUESTS, RESET_REQUESTS = HEADER_NAMES[LimitKind.REQUESTS_PER_MINUTE]
_, REMAINING_TOKENS, RESET_TOKENS = HEADER_NAMES[LimitKind.TOKENS_PER_MINUTE]
