"""Engine-side request state and the waiting queues (FCFS / priority)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from typing import Any, Iterator, Optional

from .kv_cache import Block
from .tokenizer import sample_tokens

_arrival_counter = itertools.count()


class Request:
    """One generation request as the scheduler sees it."""

    __slots__ = (
        "request_id", "all_tokens", "num_prompt_tokens", "max_tokens", "priority",
        "cache_salt", "arrival_seq", "arrival_time", "next_token", "eos_probability",
        "queue", "done", "length_limit", "finish_reason",
        "num_computed_tokens", "blocks", "block_hashes", "num_cached_blocks",
        "num_cached_tokens", "scheduled_time", "first_token_time", "finished_time",
        "num_preemptions", "quiet_until", "hang",
    )

    def __init__(self, request_id: str, prompt_tokens: list, max_tokens: int, *,
                 priority: int = 0, cache_salt: Optional[str] = None, seed: int = 0,
                 eos_probability: float = 0.0, stream: bool = False,
                 arrival_time: float = 0.0, hang: bool = False) -> None:
        self.request_id = request_id
        self.all_tokens = list(prompt_tokens)
        self.num_prompt_tokens = len(self.all_tokens)
        self.max_tokens = max_tokens
        self.priority = priority
        self.cache_salt = cache_salt
        self.arrival_seq = next(_arrival_counter)
        self.arrival_time = arrival_time
        # Output tokens are drawn one per engine step; "" means EOS was drawn.
        self.next_token = sample_tokens(seed, eos_probability).__next__
        self.eos_probability = eos_probability
        # Streaming consumers get every token as soon as it is sampled; a None
        # item marks the end.  Non-streaming consumers only await ``done``.
        # An asyncio.Queue; for a request of several choices, what files them tagged (choices._TaggedQueue).
        self.queue: Any = asyncio.Queue() if stream else None
        self.done: Optional[asyncio.Future] = None
        # Total length (prompt + output) at which the request finishes with
        # "length"; the engine caps it by max_model_len when it is queued.
        self.length_limit = self.num_prompt_tokens + max_tokens
        self.finish_reason: Optional[str] = None
        self.num_computed_tokens = 0
        self.blocks: list[Block] = []
        self.block_hashes: list[int] = []
        self.num_cached_blocks = 0
        self.num_cached_tokens: Optional[int] = None
        self.scheduled_time: Optional[float] = None
        self.first_token_time: Optional[float] = None
        self.finished_time: Optional[float] = None
        self.num_preemptions = 0
        # Engine bookkeeping: while decoding, steps that end with fewer computed
        # tokens than this need no block, hash, cache or length work (0: always check).
        self.quiet_until = 0
        # Fault injection (--hang-after-first-byte): after its first token the engine stalls the
        # request, which keeps its slot and blocks but gets no more steps until it is aborted.
        self.hang = hang

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens so far."""
        return len(self.all_tokens)

    @property
    def num_output_tokens(self) -> int:
        """Tokens generated so far (they follow the prompt in ``all_tokens``)."""
        return len(self.all_tokens) - self.num_prompt_tokens

    @property
    def finished(self) -> bool:
        """Whether the request has a finish reason (stop, length or abort)."""
        return self.finish_reason is not None

    @property
    def sort_key(self) -> tuple[int, int]:
        """Priority-policy ordering: lower priority value first, then arrival."""
        return (self.priority, self.arrival_seq)

    def text(self) -> str:
        """All generated text so far (output tokens follow the prompt in ``all_tokens``)."""
        return "".join(self.all_tokens[self.num_prompt_tokens:])


class FCFSQueue:
    """Waiting queue in arrival order; preempted requests go back to the front."""

    def __init__(self) -> None:
        self._q: deque[Request] = deque()

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._q)

    def add(self, req: Request) -> None:
        """Enqueue a new arrival at the back."""
        self._q.append(req)

    def prepend(self, req: Request) -> None:
        """Put a preempted request back at the front."""
        self._q.appendleft(req)

    def peek(self) -> Request:
        """Next request to admit."""
        return self._q[0]

    def pop(self) -> Request:
        """Remove and return the next request to admit."""
        return self._q.popleft()

    def remove(self, req: Request) -> bool:
        """Remove a specific (aborted) request; True if it was queued."""
        try:
            self._q.remove(req)
            return True
        except ValueError:
            return False


class PriorityQueue:
    """Waiting queue ordered by (priority, arrival); lower priority value runs first."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Request]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (item[2] for item in self._heap)

    def add(self, req: Request) -> None:
        """Enqueue by priority."""
        heapq.heappush(self._heap, (req.priority, req.arrival_seq, req))

    # A preempted request keeps its original key, so it naturally re-sorts.
    prepend = add

    def peek(self) -> Request:
        """Next request to admit."""
        return self._heap[0][2]

    def pop(self) -> Request:
        """Remove and return the next request to admit."""
        return heapq.heappop(self._heap)[2]

    def remove(self, req: Request) -> bool:
        """Remove a specific (aborted) request; True if it was queued."""
        for i, item in enumerate(self._heap):
            if item[2] is req:
                self._heap[i] = self._heap[-1]
                self._heap.pop()
                heapq.heapify(self._heap)
                return True
        return False


def make_waiting_queue(policy: str):
    """Return the waiting-queue implementation for a scheduling policy."""
    return PriorityQueue() if policy == "priority" else FCFSQueue()
