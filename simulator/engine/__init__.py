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

The package: state.py (what the engine holds), scheduler.py (1 and 2), update.py (4: sampling and
finishing), loop.py (3: the loop, modeled time, zero-latency bursts) and control.py (``Engine``, the
class callers use: start / stop, add / abort requests), each class built on the one before.
"""

from .control import Engine
from .loop import ZERO_LATENCY_BURST
from .state import STALLED, Scheduled

__all__ = ["STALLED", "ZERO_LATENCY_BURST", "Engine", "Scheduled"]
