"""Applying a finished step: computed tokens advance, one token is sampled per request, requests finish."""

from __future__ import annotations

from ..kv_cache import extend_block_hashes
from ..metrics import SimulatorMetrics
from ..request import Request
from .scheduler import Scheduler
from .state import _DECODING, _NEEDS_BLOCK, _PREFILLING, STALLED, Scheduled


class StepUpdate(Scheduler):
    """update(): a scheduled step's results, and every way a request finishes (stop, length, abort, stall)."""

    def update(self, scheduled: Scheduled) -> None:
        """Apply a finished step: advance computed tokens, sample, finish.

        This loop runs once per running request per step, so it is the
        simulator's hottest code in zero-latency mode: a decode step short of
        the request's ``quiet_until`` only samples; ``_advance`` does the rest.
        """
        all_decoding = scheduled is self._inflight and self._covered
        self._needs_block = needs_block = []
        sampled = len(scheduled)
        for req, n in scheduled.items():
            req.num_computed_tokens = computed = req.num_computed_tokens + n
            if computed < req.quiet_until:
                token = req.next_token()  # "" when EOS was drawn
                req.all_tokens.append(token)
                if req.queue is not None:
                    req.queue.put_nowait(token)
                if not token:
                    self._finish_running(req, "stop")
                continue
            state = self._advance(req, computed)
            if state is not _DECODING:
                if state is _NEEDS_BLOCK:
                    needs_block.append(req)
                else:  # _PREFILLING
                    all_decoding = False
                    sampled -= 1
        self.stats.generation_tokens += sampled
        self._all_decoding = all_decoding

    def _advance(self, req: Request, computed: int) -> object:
        """Full per-step work for one request; returns what it needs next step."""
        block_size = self.config.block_size
        if computed // block_size > req.num_cached_blocks:
            self.kv.cache_full_blocks(req)  # some block filled up this step
        tokens = req.all_tokens
        if computed < len(tokens):
            return _PREFILLING  # chunked prefill not done yet
        token = req.next_token()  # "" when EOS was drawn
        tokens.append(token)
        if req.first_token_time is None:
            self._on_first_token(req)
        if req.queue is not None:
            req.queue.put_nowait(token)
        if req.hang:  # fault injection: reached with the first token only, as a stalled request gets no step
            self._stall(req)
        elif not token:
            self._finish_running(req, "stop")
        elif len(tokens) >= req.length_limit:  # max_tokens reached, or max_model_len
            self._finish_running(req, "length")
        else:
            # Only a request that goes on needs hashes of its new full blocks.
            if len(tokens) >= (len(req.block_hashes) + 1) * block_size:
                extend_block_hashes(req.block_hashes, tokens, block_size, req.cache_salt)
            return self._set_quiet_until(req, len(tokens))
        return _DECODING  # finished: nothing to schedule

    def _set_quiet_until(self, req: Request, num_tokens: int) -> object:
        """Find the first decode step that needs more than sampling (see ``update``)."""
        block_size = self.config.block_size
        capacity = len(req.blocks) * block_size
        state = _DECODING
        if num_tokens > capacity:
            # The next step's decode allocates exactly one block before this
            # request is updated again (or preempts it, which resets the bound).
            capacity += block_size
            state = _NEEDS_BLOCK
        # Steps ending below each bound skip, in order: a new full block to
        # hash, the length limit, the next allocation, a block filling up.
        until = min((len(req.block_hashes) + 1) * block_size - 1, req.length_limit - 1, capacity)
        if self.kv.enable_caching:
            until = min(until, (req.num_cached_blocks + 1) * block_size)
        req.quiet_until = until
        return state

    def _on_first_token(self, req: Request) -> None:
        """Stamp the first token; like vLLM, count prompt tokens in full (cache hits included)."""
        req.first_token_time = self._clock()
        self.stats.prompt_tokens += req.num_prompt_tokens

    def _stall(self, req: Request) -> None:
        """Fault injection: keep the request's slot and blocks, but schedule it no more (until it is aborted).

        A waiter on ``done`` (a whole answer's handler) learns of it through ``STALLED``; a stream's consumer
        just gets no more tokens."""
        self.running.remove(req)
        self.stalled.add(req)
        if req.done is not None and not req.done.done():
            req.done.set_result(STALLED)

    def _finish_running(self, req: Request, reason: str) -> None:
        """Finish a running request."""
        self.running.remove(req)
        self._finish(req, reason)

    def _finish(self, req: Request, reason: str) -> None:
        """Common finish path: free KV, record metrics, wake the consumer."""
        self.kv.free(req)
        req.finish_reason = reason
        req.finished_time = now = self._clock()
        self.stats.finished[reason] += 1
        if self.metrics is not None and reason != "abort":
            self._observe_latencies(self.metrics, req, now)
        if req.queue is not None:
            req.queue.put_nowait(None)
        if req.done is not None and not req.done.done():
            req.done.set_result(reason)

    def _observe_latencies(self, m: SimulatorMetrics, req: Request, now: float) -> None:
        """Feed the latency histograms for a completed request."""
        m.e2e.observe(now - req.arrival_time)
        if req.first_token_time is not None:
            m.ttft.observe(req.first_token_time - req.arrival_time)
            m.decode.observe(now - req.first_token_time)
            if req.scheduled_time is not None:
                m.prefill.observe(req.first_token_time - req.scheduled_time)
