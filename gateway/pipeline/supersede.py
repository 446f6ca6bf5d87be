"""Cancelling superseded completions: an editor session's newer interactive request cancels its older one.

An editor asks for a completion on nearly every keystroke; most are stale before they finish. When a
request of a session is *interactive* (docs/supersession.md: `/v1/completions` by default, any request
with `x-switchyard-interactive: true`, never a batch one) and its tenant has `cancel_superseded` on, it
becomes its session's latest request, and the session's request still in flight is cancelled: the
gateway closes that request's engine connection (vLLM aborts the generation and frees its KV blocks on
disconnect), answers its client with `410 superseded` (an error event, for a stream already started)
and meters it with outcome `superseded` and the tokens generated so far.

Across gateway processes (`--workers N`, several hosts) the session's latest request lives in Redis:
`sy:<install>:ss:<session digest>` holds "<arrival µs> <worker> <request id>". One script per interactive
request swaps in the new record and, when the older request runs on another worker, publishes its id on
that worker's channel (`sy:<install>:ss:w:<worker>`); each worker subscribes to its own channel only. A
request older than the record (its keystroke came first, its script ran last) is superseded at once.
Chosen over the older request's stream checking a key at chunk boundaries: that costs a Redis round
trip per chunk (or a delay), and a non-streamed request has no chunk boundaries to check at; this costs
one command per interactive request, sent in the same write as the request's admission (the pipelined
client), and no await on the request path. Redis away or this worker not subscribed: no supersession,
requests run as usual.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any

from gateway import errors
from gateway.pipeline.asgi_io import JSON_HEADERS, ClientGone, header
from gateway.routing.versions import SESSION_HEADER

log = logging.getLogger("gateway.supersede")
INTERACTIVE_HEADER = b"x-switchyard-interactive"
FILE_HEADER = b"x-switchyard-file"
MAX_IDENTITY_BYTES = 1024  # a session id or a file identity longer than this is refused (400)
RECORD_TTL_MS = 600_000  # a session's latest-request record outlives any request
RECONNECT_SECONDS = 1.0
SUPERSEDED = "superseded"  # usage.models.Outcome.SUPERSEDED (the gateway does not import the usage app)
TRUE, FALSE = (b"true", b"1", b"yes"), (b"false", b"0", b"no")

# KEYS[1] the session's record; ARGV: arrival µs, this worker, request id, record TTL ms, channel prefix.
# Answers "stale" (a newer request is already the latest: this one is superseded), else the older
# record ("" for none) after storing this one and telling the older request's worker, if another.
SCRIPT = """
local old = redis.call('GET', KEYS[1])
if old then
  local at, worker, rid = string.match(old, '^(%d+) (%S+) (.+)$')
  if at and tonumber(at) > tonumber(ARGV[1]) then return 'stale' end
  if worker and worker ~= ARGV[2] then redis.call('PUBLISH', ARGV[5] .. worker, rid) end
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3], 'PX', ARGV[4])
return old or ''
"""


def is_interactive(kind: str, value: bytes | None, batch: bool) -> bool:
    """Whether a request may be superseded: the header's word, else completions are and chat is not."""
    if value is None:
        return kind == "completions" and not batch
    word = value.strip().lower()
    if word in FALSE:
        return False
    if word not in TRUE:
        raise errors.bad_request("invalid_interactive_header",
                                 "x-switchyard-interactive must be 'true' or 'false'.")
    if batch:
        raise errors.bad_request("invalid_interactive_header",
                                 "A request with x-switchyard-priority: batch cannot be interactive.")
    return True


def session_identity(kind: str, key_id: int, session: bytes | None, user, file: bytes | None) -> str | None:
    """The editor session a request belongs to (a digest), or None when it names none.

    The `x-switchyard-session` header, else the OpenAI `user` together with `x-switchyard-file`. Scoped
    to the API key and the endpoint: only the same key's requests of the same kind supersede each other.
    """
    for value, name in ((session, "x-switchyard-session"), (file, "x-switchyard-file")):
        if value is not None and len(value) > MAX_IDENTITY_BYTES:
            raise errors.bad_request("invalid_session_header", f"{name} is longer than {MAX_IDENTITY_BYTES} bytes.")
    if session and session.strip():
        named = b"s\x00" + session.strip()
    elif file and file.strip() and isinstance(user, str) and user:
        named = b"f\x00" + user.encode("utf-8", "surrogatepass") + b"\x00" + file.strip()
    else:
        return None
    digest = hashlib.blake2b(f"{key_id}\x00{kind}\x00".encode() + named, digest_size=16)
    return digest.hexdigest()


@dataclass(slots=True)
class InFlight:
    """An interactive request running on this worker: what cancelling it needs."""

    task: asyncio.Task
    record: Any  # gateway.metering.recorder.RequestRecord
    client: Any  # gateway.pipeline.proxy.ClientStream
    call: Any  # gateway.pipeline.inference.Call


class Superseder:
    """This worker's interactive requests, its Redis channel, and the cancelling."""

    def __init__(self, redis, redis_url: str, metrics=None):
        self.redis, self.redis_url, self.metrics = redis, redis_url, metrics
        self.prefix: str | None = None  # `sy:<install>:ss`, once the install id is known
        self.worker = uuid.uuid4().hex[:16]
        self.running: dict[str, InFlight] = {}
        self.subscribed = False  # cancelling works only while this worker hears its channel

    @property
    def active(self) -> bool:
        return self.subscribed and self.redis is not None

    def begin(self, identity: str, record, client, call) -> None:
        """Make this request its session's latest; never waits (the script's answer is handled when it comes)."""
        task = asyncio.current_task()
        entry = InFlight(task, record, client, call)  # type: ignore[arg-type]  # requests run in tasks
        self.running[record.request_id] = entry
        # Ordered by arrival (not by when authentication finished: requests waiting on one key lookup resume
        # together, in any order); the wall clock, because the session's requests may land on other workers.
        arrived = int((time.time() - (time.monotonic() - record.started)) * 1_000_000)
        args = (f"{self.prefix}:{identity}", arrived, self.worker, record.request_id,
                RECORD_TTL_MS, f"{self.prefix}:w:")
        try:
            future = self.redis.send("EVAL", SCRIPT, 1, *args)
        except Exception as error:  # noqa: BLE001 — no supersession without Redis; never a failed request
            return self._unavailable(error)
        future.add_done_callback(partial(self._decided, entry))

    def end(self, request_id: str) -> None:
        self.running.pop(request_id, None)

    def _decided(self, entry: InFlight, future: asyncio.Future) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            return self._unavailable(error)
        reply = future.result()
        if reply == b"stale":
            self._cancel(entry)
        elif reply:
            _, worker, request_id = reply.decode().split(" ", 2)
            if worker == self.worker:
                self.cancel(request_id)

    def cancel(self, request_id: str) -> None:
        """Cancel this worker's request `request_id` if it still runs (a message on our channel)."""
        entry = self.running.get(request_id)
        if entry is not None:
            self._cancel(entry)

    def _cancel(self, entry: InFlight) -> None:
        client, record, work = entry.client, entry.record, entry.call.work
        # Done, or a whole (non-streamed) answer already going out: nothing left to save.
        if client.complete or (client.started and not record.streamed) or entry.task.done():
            return
        record.outcome = SUPERSEDED
        if record.instance_id is not None and not record.prompt_tokens and work is not None:
            # Sent to an engine that has not answered yet (a non-streamed request answers only when done):
            # its prompt was processed; the tokens it generated are not known to the gateway (docs/supersession.md).
            record.prompt_tokens = work.estimate
        self.running.pop(record.request_id, None)
        self._count("cancelled")
        entry.task.cancel()  # the limits settle what the record says, then `InferenceHandler.handle` answers

    def _unavailable(self, error: BaseException) -> None:
        self._count("redis_unavailable")
        log.debug("supersession skipped: Redis failed (%s)", type(error).__name__)

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.superseded.labels(result).inc()

    async def run(self) -> None:
        """Keep this worker subscribed to its channel (started once the install id, hence the prefix, is known)."""
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 — Redis away: no supersession until it is back
                log.warning("supersession channel lost (%s); requests are not superseded until it is back", error)
            self.subscribed = False
            await asyncio.sleep(RECONNECT_SECONDS)

    async def _listen(self) -> None:
        import redis.asyncio as aioredis

        while self.prefix is None:
            await asyncio.sleep(0.1)
        client = aioredis.Redis.from_url(self.redis_url, socket_connect_timeout=2, health_check_interval=15)
        pubsub = client.pubsub()
        try:
            await pubsub.subscribe(f"{self.prefix}:w:{self.worker}")
            self.subscribed = True
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=30)
                if message is not None:
                    self.cancel(bytes(message["data"]).decode())
        finally:
            self.subscribed = False
            await pubsub.aclose()
            await client.aclose()


def session_of(state, scope: dict, kind: str, key, tenant, payload: dict, batch: bool) -> str | None:
    """The session a request may be superseded in, or None (not interactive, the tenant opted out, no Redis)."""
    if not is_interactive(kind, header(scope, INTERACTIVE_HEADER), batch):  # checked always: a bad value is a 400
        return None
    if not (tenant.cancel_superseded and state.supersede.active):
        return None
    return session_identity(kind, key.id, header(scope, SESSION_HEADER), payload.get("user"),
                            header(scope, FILE_HEADER))


async def answer_superseded(client) -> None:
    """Tell the client: a 410 answer, or an error event ending a stream already started."""
    error = superseded()
    try:
        if not client.started:
            await client.whole(error.status, [*JSON_HEADERS, *error.headers], error.body())
        elif not client.complete:
            await client.body(errors.sse_error_event(error.status, error.code, error.message), False)
    except (ClientGone, OSError):  # it left in the meantime: nothing to tell
        pass


def superseded() -> errors.GatewayError:
    """What a superseded request's client gets (410: OpenAI's clients do not retry it)."""
    return errors.GatewayError(410, "superseded", "A newer request of the same editor session replaced this one.",
                               [(b"x-should-retry", b"false")])
