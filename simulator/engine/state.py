"""What the engine holds (KV cache, waiting / running / stalled requests, loop handles) and the
markers and constants its parts share."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Optional

from ..config import SimulatorConfig
from ..kv_cache import KVCacheManager
from ..metrics import EngineStats, SimulatorMetrics
from ..request import Request, make_waiting_queue

Scheduled = dict  # Request -> number of tokens computed for it this step

# What a request needs after update(): only one token with room in its last
# block, a new block first, or more prefill.
_DECODING, _NEEDS_BLOCK, _PREFILLING = object(), object(), object()

logger = logging.getLogger("simulator.engine")  # the package's name: one logger for all its modules

STALLED = "stalled"  # what ``Request.done`` resolves to when fault injection stalls the request (not a finish)


class EngineState:
    """The engine's state; its parts (scheduler, update, loop, control) are the classes built on it."""

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
