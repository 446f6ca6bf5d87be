"""Picking each step's requests and token counts: running ones first (preempting on KV exhaustion),
then waiting ones in queue order while they fit."""

from __future__ import annotations

from ..request import Request
from .state import EngineState, Scheduled


class Scheduler(EngineState):
    """schedule(): this step's requests and token counts, with their KV slots allocated."""

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
