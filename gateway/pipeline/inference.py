"""One inference request, in one pass: key → tenant → model → limits → redaction → route → relay → meter.

The body is parsed once. Every request that got past authentication leaves exactly one
usage record, written in `handle`'s `finally`, whatever happened in between.
"""
from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from dataclasses import dataclass
from typing import Any

from gateway import errors
from gateway.config.snapshot import KeyInfo, Pool, TenantInfo
from gateway.limits.limiter import budget_name, over_budget
from gateway.metering.recorder import RequestRecord
from gateway.pipeline.asgi_io import JSON_HEADERS, ClientGone, header, read_body, request_ids
from gateway.pipeline.auth import authenticate, current_tenant
from gateway.pipeline.dedup import OPT_OUT_HEADER, cache_key, cacheable
from gateway.pipeline.fim import Rendered, render_request, renders_alike, wants_fim
from gateway.pipeline.payload import (
    BATCH_PRIORITY,
    Work,
    parse_payload,
    prompt_sample,
    request_work,
    upstream_body,
    wants_continuous_usage,
    wants_usage,
)
from gateway.pipeline.proxy import (
    FALLBACK_BUDGET,
    ClientStream,
    UpstreamFailure,
    first_chunk,
    open_upstream,
    relay_json,
    relay_stream,
    usage_of,
)
from gateway.pipeline.redaction import PREFIX_MARGIN, RedactionMode, redact_body, redact_prefix
from gateway.pipeline.sse import SseRelay
from gateway.pipeline.supersede import SUPERSEDED, answer_superseded, session_of
from gateway.routing.balancer import RouteHints
from gateway.routing.fair_queue import QueueFull, QueueTimeout
from gateway.routing.versions import SESSION_HEADER, pick_version, split_pool, sticky_key
from gateway.server import DISCONNECT_EXTENSION

MODEL_NAME_CHARS = 200  # usage.UsageEvent.model_name's length
CANCELLED_STATUS = 499  # what nginx logs for a client that went away; never sent
WATCH_AFTER_SECONDS = 0.02  # requests still running after this watch for their client leaving


@dataclass(slots=True)
class Call:
    """An authenticated, parsed request for a model this key may use."""

    kind: str
    key: KeyInfo
    tenant: TenantInfo
    pools: tuple[Pool, ...]
    payload: dict
    hints: RouteHints
    batch: bool
    use_cache: bool = True  # the client did not send x-switchyard-cache: no
    answer: bytes | None = None  # a whole 200 answer, kept for the de-duplication cache
    raw: bytes = b""  # the body as it came, forwarded unchanged while `payload` is still `parsed`
    parsed: dict | None = None
    work: Work | None = None  # its worst case, as admission reserved it (`request_work`)
    texts: list[str] | None = None  # the body's strings that could hold a secret (for redaction)
    fim: Rendered | None = None  # a fill-in-the-middle request, rendered for its model (gateway.pipeline.fim)
    session: str | None = None  # the editor session a newer request supersedes this one in (supersede.py)


class InferenceHandler:
    """Serves POST /v1/completions and /v1/chat/completions for one gateway."""

    def __init__(self, state):
        self.state = state
        # The loop this handler serves on (built at start-up, inside it), for asyncio.current_task().
        self._loop = asyncio.get_running_loop()

    async def handle(self, scope: dict, receive, send, kind: str) -> None:
        rid, ids = request_ids(scope)
        record = RequestRecord(rid, kind)
        client = ClientStream(send, ids)
        watcher = DisconnectWatcher(scope, receive, client, record, self._loop)
        session = None
        try:
            call = await self._prepare(scope, receive, record)
            watcher.arm()
            if (session := call.session) is not None:  # a newer request of it cancels this one (supersede.py)
                self.state.supersede.begin(session, record, client, call)
            await self._admitted(call, client, record)
        except errors.GatewayError as error:
            await self._refuse(client, error, record)
        except (ClientGone, OSError):  # gone while we read the body or wrote the answer
            record.outcome = "cancelled"
        except asyncio.CancelledError:
            if record.outcome not in ("cancelled", SUPERSEDED):
                raise  # the server is shutting down: still metered below
            asyncio.current_task().uncancel()  # type: ignore[union-attr]  # we run in a task
            if record.outcome == SUPERSEDED:
                await answer_superseded(client)
        finally:
            watcher.disarm()
            if session is not None:
                self.state.supersede.end(record.request_id)
            self._finish(record, client)

    async def _prepare(self, scope: dict, receive, record: RequestRecord) -> Call:
        """Authenticate, read and parse the body, and check the model; raises GatewayError."""
        state = self.state
        key = await authenticate(scope, state.keys)
        record.tenant_id, record.api_key_prefix, record.user_id = key.tenant_id, key.prefix, key.user_id
        tenant = await current_tenant(state, key)
        snapshot = state.snapshot
        if tenant.over_budget is not None:
            state.metrics.limit_rejections.labels(str(tenant.id), budget_name(tenant.over_budget)).inc()
            raise over_budget(tenant.over_budget, time.time())
        raw = await read_body(scope, receive, state.config.max_body_bytes)
        texts: list[str] = []
        payload = parse_payload(raw, record.endpoint, texts)
        record.streamed = bool(payload.get("stream"))
        pools = snapshot.pools_for(tenant.id, payload["model"])
        if pools is None:  # another tenant's dedicated model is as unknown as a made-up name
            # An unknown name is request text like any other: stored and echoed redacted.
            record.model_name = redact_prefix(payload["model"], MODEL_NAME_CHARS)
            raise errors.model_not_found(record.model_name)
        record.model_name, record.model_known = payload["model"], True
        if not snapshot.model_allowed(key, payload["model"]):
            raise errors.model_not_allowed(payload["model"])
        affinity = header(scope, b"x-switchyard-affinity")
        hints = RouteHints(payload, record.endpoint, payload["model"],
                           affinity.decode("latin-1") if affinity else None, tenant.id, cache_salt=tenant.cache_salt)
        session = header(scope, SESSION_HEADER)
        hints.session = session.decode("latin-1") if session else None  # affinity and the fair queue's flow
        split = split_pool(pools)
        if split is not None:  # a rollout splits this deployment's traffic: the version first, then an engine
            sticky = sticky_key(split.sticky_by, session, payload.get("user"), key.id)
            hints.version = pick_version(pools, sticky, random.random())
        fim = None
        if record.endpoint == "completions" and wants_fim(payload):  # before redaction and routing see the prompt
            fim = render_request(payload, pools, snapshot, payload["model"], hints.version)
            pools, hints.body = fim.pools, fim.payload
        batch = (header(scope, b"x-switchyard-priority") or b"").lower() == b"batch"
        use_cache = (header(scope, OPT_OUT_HEADER) or b"").lower() != b"no"
        editor_session = session_of(state, scope, record.endpoint, key, tenant, payload, batch)
        return Call(record.endpoint, key, tenant, pools, hints.body, hints, batch, use_cache, raw=raw, parsed=payload,
                    texts=texts, fim=fim, session=editor_session)

    async def _admitted(self, call: Call, client: ClientStream, record: RequestRecord) -> None:
        """Take the limits' reservation, then serve; the reservation is settled whatever happens.

        The reservation is the request's worst case (`request_work`): an upper bound of its prompt
        and every choice's completion (n, best_of, each prompt of a batch). Under a token budget
        only that may be spent: the engine is told each choice's length, and a stream is cut once
        its choices together generated more (docs/limits.md, "What a budget can overspend")."""
        limiter, snapshot = self.state.limiter, self.state.snapshot
        work = call.work = request_work(call.payload, call.raw, call.kind)  # 400s: bad n / best_of / batches
        if call.fim is not None:
            work.prompt_tokens += call.fim.extra_prompt_tokens
        admission = await limiter.admit(key=call.key, snapshot=snapshot, request_id=record.request_id,
                                        prompt_tokens=work.prompt_tokens, max_tokens=work.completion_tokens)
        if snapshot.has_token_budget(call.key):
            admission.token_cap = work.completion_tokens
        client.extra_headers = admission.headers
        try:
            self._redact(call, record)
            if admission.token_cap is not None:
                call.payload = _capped(call.payload, call.kind, work)
            await self._answer(call, client, record, work.estimate, admission.token_cap)
        finally:
            # Queued without waiting (the answer already went out), and nothing to cancel: a client
            # that leaves cannot leave its reservation behind. Redis runs it before any later
            # admission of this process (docs/limits.md, "Settlement").
            limiter.settle_soon(admission, used_tokens=record.prompt_tokens + record.completion_tokens)

    def _redact(self, call: Call, record: RequestRecord) -> None:
        result = redact_body(call.payload, call.tenant.redaction_mode, call.texts)
        record.redactions = result.found
        if result.blocked:
            kinds = ", ".join(sorted(result.counts))
            raise errors.bad_request("secret_detected", f"The request contains secrets ({kinds}); it was not sent.")
        # Routing keys on, and the prefix warm-up remembers, what the engine gets (gateway.routing.prefix_warmup).
        call.payload = call.hints.body = result.body
        chars = self.state.config.prompt_sample_chars
        if chars and result.mode is RedactionMode.OFF:  # the engine gets the prompt as sent; storage never does
            record.redacted_prompt = redact_prefix(prompt_sample(result.body, call.kind, chars + PREFIX_MARGIN), chars)
        else:
            record.redacted_prompt = prompt_sample(result.body, call.kind, chars)

    async def _answer(self, call: Call, client: ClientStream, record: RequestRecord, estimate: int,
                      token_cap: int | None) -> None:
        """From the de-duplication cache if it holds this answer, else from an engine (then cached)."""
        key = self._cache_key(call)
        if key is not None and await self._from_cache(key, client, record):
            return
        await self._serve(call, client, record, estimate, token_cap)
        if key is not None and call.answer is not None and not record.fallback_used:
            await self.state.dedup.put(key, record.model_version_id, call.answer)

    def _cache_key(self, call: Call) -> str | None:
        dedup = self.state.dedup
        if not (dedup.enabled and call.use_cache and cacheable(call.payload)):
            return None
        versions = tuple(sorted({p.model_version_id for p in call.pools if p.upstreams}))
        if call.hints.version is not None:  # a rollout's pick: only that version's answers are this request's
            versions = (call.hints.version[1],)
        return cache_key(dedup.prefix, call.tenant.id, versions, call.kind, call.payload)

    async def _from_cache(self, key: str, client: ClientStream, record: RequestRecord) -> bool:
        """Send a stored answer; True on a hit. A hit is metered without engine work."""
        hit = await self.state.dedup.get(key)
        self.state.metrics.dedup.labels("hit" if hit else "miss").inc()
        client.extra_headers = [*client.extra_headers, (OPT_OUT_HEADER, b"hit" if hit else b"miss")]
        if hit is None:
            return False
        record.model_version_id, body = hit
        record.cache_hit = True
        record.mark_first_byte()
        record.take_cached_usage(usage_of(body))
        await client.whole(200, JSON_HEADERS, body)
        return True

    async def _serve(self, call: Call, client: ClientStream, record: RequestRecord, estimate: int,
                     token_cap: int | None) -> None:
        """The pool's engines, or the fallback model's when the pool is saturated or too slow."""
        if not any(p.upstreams for p in call.pools) and any(p.asleep for p in call.pools):
            call = await self._woken(call, client, record)
        fallback, queues = self._fallback(call), self.state.queues
        if fallback is not None and queues.saturated(call.pools) and not queues.saturated(fallback.pools):
            return await self._serve_fallback(fallback, client, record, estimate, token_cap, "saturated")
        budget = self.state.config.fallback_first_byte_ms / 1000 if fallback is not None else None
        try:
            await self._queued(call, client, record, estimate, token_cap, budget)
        except UpstreamFailure:  # only a missed fallback budget gets here, before any byte went out
            # type checkers: a budget, hence this failure, exists only with a fallback
            await self._serve_fallback(fallback, client, record, estimate, token_cap, "slow")  # type: ignore[arg-type]

    async def _woken(self, call: Call, client: ClientStream, record: RequestRecord) -> Call:
        """Every pool of the model sleeps at zero: wake it and serve the request once it is up."""
        snapshot = lambda: self.state.snapshot.pools_for(call.key.tenant_id, call.hints.model)  # noqa: E731
        pools, waited_ms = await self.state.waker.wait(call.pools, snapshot, record.model_name)
        record.wake_wait_ms = waited_ms
        client.extra_headers = [*client.extra_headers, (b"x-switchyard-wake-ms", str(round(waited_ms)).encode())]
        return dataclasses.replace(call, pools=pools)

    def _fallback(self, call: Call) -> Call | None:
        """The same request addressed to the pools' fallback model, if one is routable."""
        found = self.state.snapshot.fallback_for(call.key, call.pools)
        if found is None:
            return None
        name, pools = found
        if call.fim is not None and not renders_alike(self.state.snapshot, pools, call.fim.template):
            return None  # its prompt is rendered for this model's template: another family would misread it
        payload = {**call.payload, "model": name}
        return dataclasses.replace(call, pools=pools, payload=payload,
                                   hints=dataclasses.replace(call.hints, body=payload, model=name))

    async def _serve_fallback(self, fallback: Call, client: ClientStream, record: RequestRecord, estimate: int,
                              token_cap: int | None, reason: str) -> None:
        record.fallback_used = True
        self.state.metrics.fallbacks.labels(record.model_name, reason).inc()
        client.extra_headers = [*client.extra_headers, (b"x-switchyard-fallback", fallback.hints.model.encode())]
        await self._queued(fallback, client, record, estimate, token_cap, None)

    async def _queued(self, call: Call, client: ClientStream, record: RequestRecord, estimate: int,
                      token_cap: int | None, budget: float | None) -> None:
        """Route within a slot of the pools' fair queue (waiting for one while they are saturated)."""
        queue = self.state.queues.queue_for(call.pools)
        if queue.capacity == 0:  # nothing routable: `_route` answers 503 no_capacity
            return await self._route(call, client, record, estimate, token_cap, budget)
        try:  # a free slot is taken at once: no coroutine to run for the usual case
            waited = 0.0 if queue.try_enter() else await queue.enter(call.tenant.id, call.batch,
                                                                       call.hints.session or call.key.id)
        except QueueFull as full:
            self.state.metrics.queue_rejections.labels(str(call.tenant.id), "full").inc()
            raise errors.queue_full(full.scope) from None
        except QueueTimeout:
            self.state.metrics.queue_rejections.labels(str(call.tenant.id), "timeout").inc()
            raise errors.queue_timeout(record.model_name) from None
        self.state.metrics.observe_queue_wait(waited)
        try:
            await self._route(call, client, record, estimate, token_cap, budget)
        finally:
            queue.leave()

    async def _route(self, call: Call, client: ClientStream, record: RequestRecord, estimate: int,
                     token_cap: int | None, budget: float | None = None) -> None:
        """Pick an engine, retrying once on another when the first fails before its first byte.

        With a fallback `budget`, an engine that misses it raises its `UpstreamFailure` to `_serve`.
        """
        state, failure, pools = self.state, None, call.pools
        tried: set[int] = set()
        for attempt in range(2):
            if attempt:  # the routing may have changed since the request arrived (a promotion, a demotion)
                pools = self._pools_now(call)
            upstream = state.balancer.choose(pools, call.hints, tried)
            if upstream is None:
                break
            if attempt:
                state.metrics.retries.labels(record.model_name).inc()
                record.retried_instance_id = record.instance_id  # its failure counts against its version
            tried.add(upstream.instance_id)
            record.instance_id, record.model_version_id = upstream.instance_id, upstream.model_version_id
            failure = await self._try(call, pools, upstream, client, record, estimate, token_cap, budget)
            if failure is None or not failure.retryable:
                break
        if failure is not None and failure.kind == FALLBACK_BUDGET:
            raise failure
        if failure is not None:
            raise failure.error
        if not tried:
            raise errors.no_capacity(record.model_name)

    def _pools_now(self, call: Call) -> tuple[Pool, ...]:
        """The request's pools in the current snapshot (its own if the model is gone from it): a retry goes to
        an engine promoted since the request arrived, and never to one demoted or stopped since."""
        return self.state.snapshot.pools_for(call.tenant.id, call.hints.model) or call.pools

    async def _try(self, call, pools, upstream, client, record, estimate, token_cap, budget) -> UpstreamFailure | None:
        """One engine call; returns the failure to act on (None once the answer went out)."""
        state = self.state
        state.balancer.acquire(upstream)
        state.demand.enter(upstream.deployment_id, record)
        try:
            body, sent = self._encode(call, pools, upstream), time.monotonic()
            response = await open_upstream(state.upstream, upstream, call.kind, body, record.request_id,
                                           state.timeouts, budget)
            first = None
            if budget and call.payload.get("stream") and response.status == 200:
                first = await first_chunk(response, max(0.001, budget - (time.monotonic() - sent)))
            state.balancer.succeeded(upstream)
            state.balancer.observe_ttft(upstream, time.monotonic() - sent)
            record.prompt_tokens = estimate  # until the engine's usage says otherwise
            await self._relay(call, response, client, record, token_cap, first, sent + state.timeouts.first_byte)
            return None
        except UpstreamFailure as failure:
            if failure.kind == FALLBACK_BUDGET:
                return failure  # slow is not broken: no failure counted against the engine
            state.balancer.failed(upstream, failure.kind)
            if client.started:  # the stream already carries the error event
                record.outcome = "timeout" if "timeout" in failure.kind else "upstream_error"
                return None
            return failure
        finally:
            state.balancer.release(upstream)
            state.demand.leave(upstream.deployment_id, record)

    def _encode(self, call: Call, pools: tuple[Pool, ...], upstream) -> bytes:
        pool = pools[0] if len(pools) == 1 else next(p for p in pools if p.deployment_id == upstream.deployment_id)
        priority = BATCH_PRIORITY if call.batch and pool.supports_priority else None
        salt = call.tenant.cache_salt if upstream.shared else None
        payload = call.payload
        if payload is call.parsed and not (salt or priority or payload.get("stream") or "priority" in payload):
            return call.raw  # nothing to add, remove or redact: re-encoding would give the same request
        return upstream_body(payload, salt=salt, priority=priority)

    async def _relay(self, call: Call, response, client: ClientStream, record, token_cap, first, first_by) -> None:
        idle = self.state.timeouts.idle
        try:
            if not call.payload.get("stream"):
                body = await relay_json(response, client, record, idle)
                call.answer = body if response.status == 200 else None
                return
            original = call.parsed if call.parsed is not None else call.payload  # what the client asked for
            relay = SseRelay(strip_usage=not wants_usage(original), token_cap=token_cap,
                             strip_running_usage=token_cap is not None and not wants_continuous_usage(original),
                             prompts=call.work.prompts,  # type: ignore[union-attr]  # admission set it
                             choices_per_prompt=call.payload.get("n") or 1)
            await relay_stream(response, client, record, relay, idle, first, first_by)
            if relay.cut:
                record.outcome = "rate_limited"
        finally:
            response.close()  # an unfinished answer closes the connection, which aborts the engine

    async def _refuse(self, client: ClientStream, error: errors.GatewayError, record: RequestRecord) -> None:
        if client.started:
            return
        client.extra_headers = [*client.extra_headers, *error.headers]
        await client.whole(error.status, JSON_HEADERS, error.body())

    def _finish(self, record: RequestRecord, client: ClientStream) -> None:
        """Meter the request once; requests that never authenticated are only counted."""
        record.status_code = client.status or CANCELLED_STATUS
        record.outcome = record.outcome or _outcome(record.status_code)
        self.state.metrics.observe_done(record)
        if record.tenant_id is not None:
            self.state.recorder.record(record.as_row())


def _capped(payload: dict, kind: str, work: Work) -> dict:
    """Only what was reserved may be spent: the engine is told each choice's length when the client
    did not name it (a request cannot be cut once answered whole), and a stream asks for usage on
    every chunk, so that the relay counts what is generated exactly (gateway.pipeline.sse)."""
    capped = payload if work.asked else {**payload, "max_tokens": work.per_choice}
    if payload.get("stream"):
        options = payload.get("stream_options")
        options = options if isinstance(options, dict) else {}
        capped = {**capped, "stream_options": {**options, "continuous_usage_stats": True}}
    return capped


def _outcome(status: int) -> str:
    if status < 400:
        return "ok"
    if status == 429:
        return "rate_limited"
    if status == 504:
        return "timeout"
    if status == CANCELLED_STATUS:
        return "cancelled"
    return "client_error" if status < 500 else "upstream_error"


class DisconnectWatcher:
    """Cancels the request when its client goes away before the answer is complete.

    Under the gateway's own server (gateway/server/) the server calls back on a disconnect
    (its `switchyard.disconnect` extension): no timer and no task per request. Under any other
    ASGI server a watcher task waits on `receive()`, started only for requests still running
    after `WATCH_AFTER_SECONDS` (most answers are done sooner, and a task per request costs
    more than the rest of the admission); a client that leaves earlier is noticed then (the
    server keeps the disconnect message), so its request is cancelled at most that much later.
    """

    __slots__ = ("_receive", "_client", "_record", "_loop", "_timer", "_task", "_request", "_register")
    _timer: asyncio.TimerHandle | None
    _task: asyncio.Future | None
    _request: Any  # the request's task, from arm() on

    def __init__(self, scope: dict, receive, client: ClientStream, record: RequestRecord, loop):
        self._receive, self._client, self._record, self._loop = receive, client, record, loop
        self._timer = self._task = self._request = None
        extensions = scope.get("extensions")
        self._register = extensions.get(DISCONNECT_EXTENSION) if extensions else None

    def arm(self) -> None:
        self._request = asyncio.current_task(self._loop)
        if self._register is not None:
            self._register(self._gone)
        else:
            self._timer = self._loop.call_later(WATCH_AFTER_SECONDS, self._start)

    def disarm(self) -> None:
        if self._register is not None:
            self._register(None)
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()

    def _gone(self) -> None:
        if not self._client.complete:
            self._record.outcome = "cancelled"
            self._request.cancel()

    def _start(self) -> None:
        self._timer = None
        if not self._request.done():
            self._task = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self._gone()
                return
