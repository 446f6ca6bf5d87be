"""One usage event per request, exactly once, buffered in memory and written in batches.

`RequestRecord` accumulates what a request used while it runs; `UsageRecorder.record` takes
its event once (`as_row()`, or the `as_event()` dict; the request pipeline finishes a record in
one place, in a `finally`), and a
background task writes batches with `usage.services.record_usage_batch` in a thread. The
batch insert is idempotent by request_id, so retrying a batch after an error cannot count twice.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

log = logging.getLogger("gateway.metering")
MAX_WRITE_ATTEMPTS = 5


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
            self.cache_hit, self.fallback_used, self.streamed, self.redacted_prompt,
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
            "redacted_prompt": self.redacted_prompt,
        }


# UsageEvent's columns in the model's order (usage.ingest.COLUMNS; a test keeps the two equal), so
# the writer inserts rows as they are.
ROW_FIELDS = ("request_id", "occurred_at", "tenant_id", "api_key_prefix", "user_id", "model_name",
              "model_version_id", "instance_id", "endpoint", "status_code", "outcome", "prompt_tokens",
              "completion_tokens", "cached_tokens", "ttft_ms", "latency_ms", "redactions", "cache_hit",
              "fallback_used", "streamed", "redacted_prompt")


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def write_batch(events: list[dict | list]) -> int:
    """The default writer: the usage service, with a fresh connection check (runs in a thread).

    Events are `as_event` dicts or `as_row` rows (the cheaper: no dict, no per-field lookups)."""
    from django.db import close_old_connections

    from usage.services import record_usage_batch

    close_old_connections()
    return record_usage_batch(events)


class UsageRecorder:
    """The in-memory buffer and the task that drains it."""

    def __init__(self, writer: Callable[[list[dict | list]], int] = write_batch, *, run_in_thread=asyncio.to_thread,
                 flush_seconds: float = 1.0, batch_size: int = 500):
        self._writer = writer
        self._run_in_thread = run_in_thread
        self._flush_seconds = flush_seconds
        self._batch_size = batch_size
        self._buffer: list[dict | list] = []
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self.written = 0

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
            await self.flush()

    async def flush(self) -> None:
        """Write everything buffered so far, in batches."""
        async with self._lock:  # the shutdown flush must not interleave with the task's
            while self._buffer:
                # Removed only once written (or given up), so a cancelled flush loses nothing.
                batch = self._buffer[: self._batch_size]
                await self._write(batch)
                del self._buffer[: len(batch)]

    async def _write(self, batch: list[dict | list]) -> None:
        for attempt in range(1, MAX_WRITE_ATTEMPTS + 1):
            try:
                self.written += await self._run_in_thread(self._writer, batch)
                return
            except Exception:  # the database may be restarting: retry the same (idempotent) batch
                log.exception("usage batch write failed (attempt %d of %d)", attempt, MAX_WRITE_ATTEMPTS)
                await asyncio.sleep(min(0.2 * 2 ** attempt, 5.0))
        log.error("dropped %d usage events after %d attempts", len(batch), MAX_WRITE_ATTEMPTS)

    @property
    def pending(self) -> int:
        return len(self._buffer)
