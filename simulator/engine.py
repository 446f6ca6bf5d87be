"""Continuous-batching scheduler running as one asyncio task.

Each engine step (a simplified vLLM v1 scheduler iteration):

1. Running requests are scheduled first; each needs ``num_tokens -
   num_computed_tokens`` new tokens (1 while decoding, more while a chunked
   prefill is in progress), bounded by the ``max_num_batched_tokens`` budget.
   If the KV cache has no block for one, the lowest-ranked running request is
   preempted (blocks freed, recomputed later), exactly like vLLM.
2. Waiting requests are admitted in queue order while ``len(running) <
   max_num_seqs``, budget remains and blocks fit; a head that does not fit
   blocks the queue (no skipping).  Prefix-cache hits skip their prefill.
3. Modeled compute time is slept with ``asyncio.sleep``:
   ``prefill_ms * prefill_tokens + decode_ms * (1 + alpha * (decodes - 1))``.
4. Every request whose computed tokens caught up samples one token, which is
   pushed to its stream queue right away.
"""

from __future__ import annotations

import asyncio
import logging
import time
from itertools import islice
from typing import Optional

from .config import SimulatorConfig
from .kv_cache import KVCacheManager, extend_block_hashes
from .metrics import EngineStats, SimulatorMetrics
from .request import Request, make_waiting_queue

Scheduled = dict  # Request -> number of tokens computed for it this step

# What a request needs after update(): only one token with room in its last
# block, a new block first, or more prefill.
_DECODING, _NEEDS_BLOCK, _PREFILLING = object(), object(), object()

logger = logging.getLogger(__name__)

STALLED = "stalled"  # what ``Request.done`` resolves to when fault injection stalls the request (not a finish)

# Most zero-latency steps run between two yields to the event loop.  A request's
# whole decode usually fits (max_tokens 16: 16 steps), so a lone request costs
# one loop wake-up, not one per token; the cap bounds how long HTTP waits
# behind a long generation (~64 steps of a full batch: a few milliseconds).
ZERO_LATENCY_BURST = 64


class Engine:
    """Owns the KV cache, waiting/running sets and the engine-loop task."""

    def __init__(self, config: SimulatorConfig, metrics: Optional[SimulatorMetrics] = None) -> None:
        self.config = config
        self.kv = KVCacheManager(config.num_gpu_blocks, config.block_size, config.enable_prefix_caching)
        self.waiting = make_waiting_queue(config.scheduling_policy)
        self.running: list[Request] = []
        # Fault injection (--hang-after-first-byte): requests stalled after their first token. They hold
        # their slot (counted against max_num_seqs, shown as running) and their KV blocks, and take no
        # steps; only an abort (the client leaving) ends them.
        self.stalled: set[Request] = set()
        self.stats = EngineStats()
        self.metrics = metrics
        self.num_steps = 0
        self._wakeup = asyncio.Event()
        self._task: Optional[asyncio.Task] = None
        # Without modeled time there is no loop task: add_request() and abort()
        # schedule a burst of steps as a plain callback (see _burst).
        self._zero_latency = config.zero_latency
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._burst_handle: Optional[asyncio.Handle] = None
        self._clock = time.monotonic
        # Set by update() when every running request just decodes one token
        # next step, with room in its last block or in one new block (listed in
        # _needs_block, running order): schedule() then skips the scan.
        self._all_decoding = False
        self._needs_block: list[Request] = []
        self._covered = False  # the last schedule() included every running request
        self._inflight: Scheduled = {}  # the last schedule()'s result, until update()

    # ------------------------------------------------------------------ API
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

    # ----------------------------------------------------------- main loop
    async def run(self) -> None:
        """Engine loop: schedule, sleep the modeled step time, emit tokens."""
        while True:
            if not self.running and not len(self.waiting):
                await self._idle()
                continue
            scheduled = self.schedule()
            if not scheduled:
                # Nothing fits (cannot happen for validated requests, but
                # never spin): wait for an arrival or an abort.
                await self._idle()
                continue
            await asyncio.sleep(self.step_duration(scheduled))
            self.update(scheduled)

    def _burst(self) -> None:
        """Zero-latency engine loop: steps back to back, yielding to the event loop between bursts.

        Every step is the same schedule() + update() as with modeled time; only
        the event loop sees fewer iterations (one per ZERO_LATENCY_BURST steps,
        not one per step) and no task, so arrivals and aborts land between bursts.
        """
        self._burst_handle = None
        try:
            more = self._run_burst(ZERO_LATENCY_BURST)
        except Exception:
            logger.exception("simulator engine loop crashed")
            return
        if more and self._loop is not None:  # cut short with work left: let HTTP flow, then go on
            self._burst_handle = self._loop.call_soon(self._burst)

    def _run_burst(self, max_steps: int) -> bool:
        """Run up to ``max_steps`` steps; True if work is left that can go on at once."""
        steps = 0
        while steps < max_steps:
            if not self.running and not len(self.waiting):
                return False
            quiet = self.quiet_steps()
            if quiet > 0:
                quiet = min(quiet, max_steps - steps)
                self.fast_forward(quiet)
                steps += quiet
                continue
            scheduled = self.schedule()
            if not scheduled:
                return False  # nothing fits: wait for an arrival or an abort
            self.update(scheduled)
            steps += 1
        return True

    def quiet_steps(self) -> int:
        """How many next steps would only sample one token per running request (0: none).

        Such a step schedules every running request for one decode token with
        room in its blocks (the first one may give each request in
        ``_needs_block`` its next block, as schedule() would), admits nobody,
        and its update() takes the quiet path (see ``update``) for every
        request, which no EOS draw can end: all bounds every request's
        ``quiet_until`` keeps until a step changes more.
        """
        running = self.running
        if (not self._all_decoding or not running or len(self._needs_block) > self.kv.pool.num_free
                or len(running) > self.config.max_num_batched_tokens
                or (len(self.waiting) and len(running) + len(self.stalled) < self.config.max_num_seqs)):
            return 0
        quiet = self.config.max_model_len
        for req in running:
            if req.eos_probability:
                return 0
            ahead = req.quiet_until - req.num_computed_tokens
            if ahead < quiet:
                quiet = ahead
        return quiet - 1  # the step reaching quiet_until does more than sample

    def fast_forward(self, num_steps: int) -> None:
        """Run ``num_steps`` (at most ``quiet_steps()``) steps at once, as schedule() + update() would."""
        running = self.running
        if self._needs_block:
            self._allocate_next_blocks()
            self._needs_block = []
        for req in running:
            req.num_computed_tokens += num_steps
            tokens = list(islice(iter(req.next_token, None), num_steps))
            req.all_tokens += tokens
            if req.queue is not None:
                for token in tokens:
                    req.queue.put_nowait(token)
        self.num_steps += num_steps
        self.stats.generation_tokens += num_steps * len(running)
        # What the last of those schedule() + update() pairs leaves behind.
        self._inflight = dict.fromkeys(running, 1)
        self._covered = True

    async def _idle(self) -> None:
        """Wait until add_request() or abort() wakes the loop."""
        self._wakeup.clear()
        await self._wakeup.wait()

    def step_duration(self, scheduled: Scheduled) -> float:
        """Modeled wall time of one step, in seconds."""
        cfg = self.config
        if cfg.zero_latency:
            return 0.0
        prefill_tokens, decodes = 0, 0
        for req, n in scheduled.items():
            if n == 1 and req.num_computed_tokens >= req.num_prompt_tokens:
                decodes += 1
            else:
                prefill_tokens += n
        ms = cfg.prefill_ms_per_token * prefill_tokens
        if decodes:
            ms += cfg.decode_ms_per_token * (1.0 + cfg.batch_alpha * (decodes - 1))
        return ms * cfg.latency_multiplier / 1000.0

    # ----------------------------------------------------------- schedule
    def schedule(self) -> Scheduled:
        """Pick this step's requests and token counts, allocating KV slots."""
        running, budget = self.running, self.config.max_num_batched_tokens
        if (self._all_decoding and len(running) <= budget
                and len(self._needs_block) <= self.kv.pool.num_free):
            # What _schedule_running would pick: one token each, in order, and
            # the same one-block allocations, which all fit without preempting.
            self._allocate_next_blocks()
            scheduled: Scheduled = dict.fromkeys(running, 1)
            budget, preempted = budget - len(running), False
        else:
            scheduled = {}
            budget, preempted = self._schedule_running(scheduled)
        if not preempted:
            # vLLM does not admit new work in a step that had to preempt.
            self._schedule_waiting(scheduled, budget)
        self._all_decoding = False
        self._covered = len(scheduled) == len(running)  # scheduled is a subset of running
        self._inflight = scheduled
        self.num_steps += 1
        return scheduled

    def _allocate_next_blocks(self) -> None:
        """Give each request in ``_needs_block`` its next block, in running order."""
        allocate = self.kv.pool.allocate
        for req in self._needs_block:
            if req.finish_reason is None:  # not aborted since update()
                req.blocks.extend(allocate(1))

    def _schedule_running(self, scheduled: Scheduled) -> tuple[int, bool]:
        """Schedule running requests, preempting on KV exhaustion; returns (budget, preempted)."""
        budget = self.config.max_num_batched_tokens
        evicted: set[Request] = set()
        block_size = self.config.block_size
        for req in list(self.running):
            if budget <= 0:
                break
            if evicted and req in evicted:
                continue  # preempted earlier in this loop
            n = len(req.all_tokens) - req.num_computed_tokens
            if n > budget:
                n = budget
            total = req.num_computed_tokens + n
            # allocate_slots' decode fast path, inlined: the last block still has room.
            if total > len(req.blocks) * block_size:
                fits, refund = self._allocate_or_preempt(req, total, scheduled, evicted)
                budget += refund
                if not fits:
                    continue
            scheduled[req] = n
            budget -= n
        return budget, bool(evicted)

    def _allocate_or_preempt(self, req: Request, total: int, scheduled: Scheduled,
                             evicted: set) -> tuple[bool, int]:
        """Allocate slots for ``req``, preempting until they fit; returns (fits, tokens un-scheduled)."""
        refund = 0
        while not self.kv.allocate_slots(req, total):
            victim = self._pick_victim()
            refund += self._preempt(victim, scheduled)
            evicted.add(victim)
            if victim is req:
                return False, refund
        return True, refund

    def _pick_victim(self) -> Request:
        """Running request to preempt: newest (FCFS) or worst priority."""
        if self.config.scheduling_policy == "priority":
            return max(self.running, key=lambda r: r.sort_key)
        return self.running[-1]

    def _preempt(self, req: Request, scheduled: Scheduled) -> int:
        """Evict a running request back to the waiting queue; returns tokens un-scheduled."""
        self.running.remove(req)
        self.kv.free(req)
        req.num_computed_tokens = 0
        req.quiet_until = 0
        req.num_preemptions += 1
        self.stats.num_preemptions += 1
        self.waiting.prepend(req)
        return scheduled.pop(req, 0)

    def _schedule_waiting(self, scheduled: Scheduled, budget: int) -> None:
        """Admit waiting requests in queue order while they fit."""
        max_seqs = self.config.max_num_seqs - len(self.stalled)  # a stalled request keeps its slot
        while budget > 0 and len(self.waiting) and len(self.running) < max_seqs:
            req = self.waiting.peek()
            hits, num_hit = self.kv.get_computed_blocks(req)
            n = min(len(req.all_tokens) - num_hit, budget)
            if not self.kv.allocate_slots(req, num_hit + n, hits):
                return  # head-of-line blocking, as in vLLM
            self.waiting.pop()
            self.running.append(req)
            req.num_computed_tokens = num_hit
            scheduled[req] = n
            budget -= n
            self._on_admitted(req, num_hit)

    def _on_admitted(self, req: Request, num_hit: int) -> None:
        """Record prefix-cache and queue-time stats on first admission."""
        if req.scheduled_time is not None:
            return  # re-admission after preemption
        req.scheduled_time = self._clock()
        req.num_cached_tokens = num_hit
        self.stats.prefix_cache_queries += req.num_prompt_tokens
        self.stats.prefix_cache_hits += num_hit
        if self.metrics is not None:
            self.metrics.queue.observe(req.scheduled_time - req.arrival_time)

    # ------------------------------------------------------------- update
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
