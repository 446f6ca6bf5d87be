"""The engine loop: with modeled time an asyncio task that sleeps each step's duration; without it,
bursts of steps run as plain callbacks, fast-forwarding runs of steps that only sample."""

from __future__ import annotations

import asyncio
from itertools import islice

from .state import Scheduled, logger
from .update import StepUpdate

# Most zero-latency steps run between two yields to the event loop.  A request's
# whole decode usually fits (max_tokens 16: 16 steps), so a lone request costs
# one loop wake-up, not one per token; the cap bounds how long HTTP waits
# behind a long generation (~64 steps of a full batch: a few milliseconds).
ZERO_LATENCY_BURST = 64


class EngineLoop(StepUpdate):
    """run() and _burst(): schedule, (sleep the modeled step time,) update, again while there is work."""

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
