"""One usage event per request, exactly once, buffered in memory and written in batches.

`RequestRecord` accumulates what a request used while it runs; `UsageRecorder.record` takes
its event once (`as_row()`, or the `as_event()` dict; the request pipeline finishes a record in
one place, in a `finally`), and a
background task writes batches with `usage.services.record_usage_batch` in a thread. The
batch insert is idempotent by request_id, so writing a batch again (a split batch, a spooled
one replayed after an outage) cannot count twice. What happens when a write fails: `UsageRecorder`.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

log = logging.getLogger("gateway.metering")


@dataclass(slots=True)
class RequestRecord:
    """What one request used; filled in as the request moves through the pipeline."""

    request_id: str
    endpoint: str
    started: float = field(default_factory=time.monotonic)
    tenant_id: int | None = None
    api_key_prefix: str = ""
    user_id: int | None = None
    model_name: str = ""
    model_version_id: int | None = None
    instance_id: int | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    ttft_ms: float | None = None
    redactions: int = 0
    cache_hit: bool = False  # answered from the de-duplication cache
    fallback_used: bool = False
    streamed: bool = False
    status_code: int = 0
    outcome: str = ""
    model_known: bool = False  # the name is in the snapshot (safe as a metrics label)
    redacted_prompt: str = ""  # the prompt's start after redaction (slow-requests page)
    wake_wait_ms: float | None = None  # waited for a deployment asleep at zero to wake
    retried_instance_id: int | None = None  # failed before the first byte; the request went to another engine

    def mark_first_byte(self) -> None:
        """Record time to first token (first body bytes from the engine), once."""
        if self.ttft_ms is None:
            self.ttft_ms = (time.monotonic() - self.started) * 1000

    def take_usage(self, usage: dict | None) -> None:
        """Adopt the engine's usage object (prompt, completion and cached tokens)."""
        if not isinstance(usage, dict):
            return
        self.prompt_tokens = _count(usage.get("prompt_tokens"))
        self.completion_tokens = _count(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details") or {}
        self.cached_tokens = _count(details.get("cached_tokens") if isinstance(details, dict) else 0)

    def take_cached_usage(self, usage: dict | None) -> None:
        """A de-duplicated answer: its prompt counts as cached, and no engine generated anything."""
        self.take_usage(usage)
        self.cached_tokens, self.completion_tokens = self.prompt_tokens, 0

    def as_row(self) -> list:
        """The UsageEvent values in `ROW_FIELDS` order: what `as_event` holds, without building a dict."""
        return [
            # occurred_at: when the request finished.
            self.request_id, datetime.now(timezone.utc), self.tenant_id, self.api_key_prefix, self.user_id,
            self.model_name[:200], self.model_version_id, self.instance_id, self.endpoint, self.status_code,
            self.outcome, self.prompt_tokens, self.completion_tokens, self.cached_tokens, self.ttft_ms,
            (time.monotonic() - self.started) * 1000, self.redactions,
            # cache_hit: the gateway's de-duplication cache answered (prefix-cache reuse is in cached_tokens).
            self.cache_hit, self.fallback_used, self.streamed, self.redacted_prompt, self.wake_wait_ms,
            self.retried_instance_id,
        ]

    def as_event(self) -> dict:
        """The UsageEvent fields (the values of `as_row`; tests/gateway/test_metering_rows.py keeps them equal)."""
        return {
            "request_id": self.request_id, "occurred_at": datetime.now(timezone.utc), "tenant_id": self.tenant_id,
            "api_key_prefix": self.api_key_prefix, "user_id": self.user_id, "model_name": self.model_name[:200],
            "model_version_id": self.model_version_id, "instance_id": self.instance_id,
            "endpoint": self.endpoint, "status_code": self.status_code, "outcome": self.outcome,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens, "ttft_ms": self.ttft_ms,
            "latency_ms": (time.monotonic() - self.started) * 1000, "redactions": self.redactions,
            "cache_hit": self.cache_hit, "fallback_used": self.fallback_used, "streamed": self.streamed,
            "redacted_prompt": self.redacted_prompt, "wake_wait_ms": self.wake_wait_ms,
            "retried_instance_id": self.retried_instance_id,
        }


# UsageEvent's columns in the model's order (usage.ingest.COLUMNS; a test keeps the two equal), so
# the writer inserts rows as they are.
ROW_FIELDS = ("request_id", "occurred_at", "tenant_id", "api_key_prefix", "user_id", "model_name",
              "model_version_id", "instance_id", "endpoint", "status_code", "outcome", "prompt_tokens",
              "completion_tokens", "cached_tokens", "ttft_ms", "latency_ms", "redactions", "cache_hit",
              "fallback_used", "streamed", "redacted_prompt", "wake_wait_ms", "retried_instance_id")


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def write_batch(events: list[dict | list]) -> int:
    """The default writer: the usage service, with a fresh connection check (runs in a thread).

    Events are `as_event` dicts or `as_row` rows (no dict to build)."""
    from django.db import close_old_connections

    from usage.services import record_usage_batch

    close_old_connections()
    return record_usage_batch(events)


def probe_database() -> None:
    """One trivial query: raises while the database is away (runs in a thread)."""
    from django.db import close_old_connections, connection

    close_old_connections()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


class DatabaseAway(Exception):
    """The usage write failed because the database is unreachable, not because of what it holds."""


class UsageRecorder:
    """The in-memory buffer, the task that drains it, and what happens when a write fails.

    - A batch the database refuses (a value it cannot store, a constraint) is split in halves and
      each half written again, down to single events: only an event refused on its own is set
      aside, in the dead letter, counted and logged with its request id. The rest is stored.
    - A batch that fails because the database is away (`gateway.clients.database.database_unavailable`)
      goes to the spool (gateway/metering/spool.py) at once; spooled events are replayed when a write or
      a probe succeeds again, by this process or any other of the install.
    - Events that fit nowhere (the spool full or failing) are lost: counted and logged, never silently.
    """

    def __init__(self, writer: Callable[[list[dict | list]], int] = write_batch, *, run_in_thread=asyncio.to_thread,
                 flush_seconds: float = 1.0, batch_size: int = 500, spool=None, dead_letter=None, metrics=None,
                 probe: Callable[[], None] = probe_database, run_file_io=asyncio.to_thread):
        self._writer = writer
        self._run_in_thread = run_in_thread
        self._flush_seconds = flush_seconds
        self._batch_size = batch_size
        self.spool, self._dead_letter, self._metrics = spool, dead_letter, metrics
        self._probe, self._file_io = probe, run_file_io
        self._buffer: list[dict | list] = []
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self.written = self.spooled = self.replayed = self.set_aside = self.lost = 0
        self.database_away = False

    def record(self, event: dict | list) -> None:
        """Queue one event, `as_row()` or `as_event()` (no I/O: called on the request path)."""
        self._buffer.append(event)
        if len(self._buffer) >= self._batch_size:
            self._wake.set()

    async def run(self) -> None:
        """Flush every `flush_seconds`, or sooner when a full batch is waiting."""
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self._flush_seconds)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.flush()
            except Exception:  # the spool's disk, say: log and keep the task alive (nothing was dropped)
                log.exception("usage flush failed; retrying at the next one")

    async def flush(self) -> None:
        """Write everything buffered so far, in batches; then replay the spool if the database is there."""
        async with self._lock:  # the shutdown flush must not interleave with the task's
            while self._buffer:
                # Removed only once stored, spooled or set aside, so a cancelled flush loses nothing.
                batch = self._buffer[: self._batch_size]
                await self._deliver(batch)
                del self._buffer[: len(batch)]
            await self._replay()

    async def _deliver(self, batch: list) -> None:
        try:
            await self._store(batch)
        except DatabaseAway as away:
            self._went_away(away)
            await self._to_spool(batch)
        else:
            self.database_away = False

    async def _store(self, batch: list) -> None:
        """Write the batch, splitting it on a refusal; raises DatabaseAway (nothing set aside then)."""
        from gateway.clients.database import database_unavailable

        try:
            self.written += await self._run_in_thread(self._writer, batch)
        except Exception as error:
            if database_unavailable(error):
                raise DatabaseAway(type(error).__name__) from error
            if len(batch) == 1:
                return await self._put_aside(batch[0], error)
            middle = len(batch) // 2
            await self._store(batch[:middle])
            await self._store(batch[middle:])

    def _went_away(self, away: DatabaseAway) -> None:
        if not self.database_away:
            log.error("usage database unavailable (%s); spooling usage events until it returns", away)
        self.database_away = True

    async def _put_aside(self, event, error: Exception) -> None:
        rid = _request_id(event)
        # The request id and the error's type only: the message may quote the row (prompt text).
        log.error("usage event %s refused by the database (%s); set aside in the dead letter",
                  rid, type(error).__name__)
        kept = False
        if self._dead_letter is not None:
            try:
                kept = await self._file_io(self._dead_letter.set_aside, event, error)
            except OSError:
                log.exception("could not write the usage dead letter")
        if kept:
            self.set_aside += 1
            self._count("usage_set_aside")
        else:
            self._lose([event], "dead_letter_full" if self._dead_letter is not None else "refused")

    async def _to_spool(self, batch: list) -> None:
        if self.spool is None:
            return self._lose(batch, "no_spool")
        try:
            kept = await self._file_io(self.spool.append, batch)
        except OSError:
            log.exception("could not spool %d usage events", len(batch))
            return self._lose(batch, "spool_error")
        self.spooled += kept
        self._count("usage_spooled", kept)
        if kept < len(batch):
            self._lose(batch[kept:], "spool_full")

    def _lose(self, events: list, reason: str) -> None:
        self._count_lost(len(events), reason, f"request ids {_request_id(events[0])} … {_request_id(events[-1])}")

    def _count_lost(self, count: int, reason: str, which: str) -> None:
        self.lost += count
        if self._metrics is not None:
            self._metrics.usage_lost.labels(reason).inc(count)
        log.error("lost %d usage events (%s): %s", count, reason, which)

    async def _replay(self) -> None:
        """Replay free spool segments (ours once the database answers again), whole segments, up to
        about `REPLAY_EVENTS_PER_FLUSH` events, so new events are not held up behind a long replay."""
        spool = self.spool
        if spool is None or not await self._database_answers():
            return
        await self._file_io(spool.release)  # our own segment, if any, becomes free to replay
        replayed = 0
        for path in await self._file_io(spool.free_segments):
            if replayed >= REPLAY_EVENTS_PER_FLUSH:
                return
            segment = await self._file_io(spool.claim, path)
            if segment is None:  # another process took it
                continue
            try:
                replayed += await self._replay_segment(segment)
            except DatabaseAway as away:
                self._went_away(away)
                return
            finally:
                await self._file_io(segment.close)

    async def _database_answers(self) -> bool:
        """True unless the last write found the database away and a probe finds it still away."""
        if not self.database_away:
            return True
        try:
            await self._run_in_thread(self._probe)
        except Exception:
            return False
        log.warning("usage database answers again; replaying spooled usage events")
        self.database_away = False
        return True

    async def _replay_segment(self, segment) -> int:
        count = 0
        while batch := await self._file_io(segment.read, self._batch_size):
            await self._store(batch)
            count += len(batch)
        if segment.torn:  # an append cut short by a crash: those events were never confirmed spooled
            self._count_lost(segment.torn, "torn_spool_line", f"unreadable lines in {segment.path.name}")
        await self._file_io(segment.delete)
        self.replayed += count
        self._count("usage_replayed", count)
        return count

    def _count(self, metric: str, amount: int = 1) -> None:
        if self._metrics is not None and amount:
            getattr(self._metrics, metric).inc(amount)

    def export_gauges(self) -> None:
        """Set the buffer's and the spool's gauges (before each scrape; every second with `--workers`)."""
        metrics = self._metrics
        metrics.usage_pending.set(len(self._buffer))
        metrics.usage_database_away.set(1 if self.database_away else 0)
        if self.spool is not None:
            size = self.spool.size()  # a listing of a small directory: cheap enough for a scrape
            metrics.usage_spool_bytes.set(size.bytes)
            metrics.usage_spool_segments.set(size.segments)

    def close(self) -> None:
        """Unlock our spool segment (after the last flush): another process may replay it now."""
        if self.spool is not None:
            self.spool.release()

    @property
    def pending(self) -> int:
        return len(self._buffer)


REPLAY_EVENTS_PER_FLUSH = 10_000


def _request_id(event) -> str:
    value = event.get("request_id") if isinstance(event, dict) else event[0]
    return repr(value)[:80]  # a request id the gateway minted, or whatever another writer passed
