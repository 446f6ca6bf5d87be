"""The engine as its callers see it: start and stop the loop, add, enqueue, step and abort requests."""

from __future__ import annotations

import asyncio

from ..kv_cache import extend_block_hashes
from ..request import Request
from .loop import EngineLoop
from .state import Scheduled, logger


class Engine(EngineLoop):
    """Owns the KV cache, waiting/running sets and the engine-loop task."""

    def start(self) -> None:
        """Start the engine loop on the running event loop (idempotent)."""
        if self._zero_latency:
            return  # steps run in bursts scheduled by add_request()
        if self._task is None or self._task.done():
            self._wakeup = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self.run())
            self._task.add_done_callback(self._log_crash)

    @staticmethod
    def _log_crash(task: asyncio.Task) -> None:
        """Make an engine-loop crash loud instead of silently hanging clients."""
        if not task.cancelled() and task.exception() is not None:
            logger.error("simulator engine loop crashed", exc_info=task.exception())

    async def stop(self) -> None:
        """Cancel the engine loop and wait for it to exit."""
        if self._burst_handle is not None:
            self._burst_handle.cancel()
            self._burst_handle = None
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def max_request_tokens(self) -> int:
        """Largest prompt+output length one request may ever need."""
        return min(self.config.max_model_len, self.config.num_gpu_blocks * self.config.block_size)

    def add_request(self, req: Request) -> None:
        """Queue a validated request and wake the engine loop."""
        self._loop = loop = asyncio.get_running_loop()
        req.done = loop.create_future()
        self.enqueue(req)
        if self._zero_latency:
            if self._burst_handle is None:
                # Requests arriving in this same loop iteration join the burst.
                self._burst_handle = loop.call_soon(self._burst)
            return
        self.start()
        self._wakeup.set()

    def unfinished(self) -> int:
        """Requests waiting or running (what vLLM's --max-num-queued-reqs bounds)."""
        return len(self.waiting) + self.num_running()

    def num_running(self) -> int:
        """Requests holding a slot: those the scheduler runs and those stalled by fault injection."""
        return len(self.running) + len(self.stalled)

    def enqueue(self, req: Request) -> None:
        """Put a request in the waiting queue without touching the loop (tests step manually)."""
        req.arrival_time = self._clock()
        req.length_limit = min(req.num_prompt_tokens + req.max_tokens, self.config.max_model_len)
        extend_block_hashes(req.block_hashes, req.all_tokens, self.config.block_size, req.cache_salt)
        self.waiting.add(req)

    def step(self) -> Scheduled:
        """Run one engine step synchronously, ignoring modeled time (for tests/tools)."""
        scheduled = self.schedule()
        self.update(scheduled)
        return scheduled

    def abort(self, req: Request) -> None:
        """Abort a request (client went away): free its blocks, count it."""
        if req.finished:
            return
        if req in self.stalled:
            self.stalled.remove(req)
        elif not self.waiting.remove(req) and req in self.running:
            self.running.remove(req)
        self._inflight.pop(req, None)  # aborted while its step was "running": update skips it
        self._finish(req, "abort")
        # Freed blocks may let a blocked queue head in.
        if not self._zero_latency:
            self._wakeup.set()
        elif self._loop is not None and self._burst_handle is None and len(self.waiting):
            self._burst_handle = self._loop.call_soon(self._burst)
