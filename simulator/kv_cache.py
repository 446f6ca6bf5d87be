"""Paged KV cache with vLLM-style automatic prefix caching.

Model (mirrors vLLM v1's BlockPool / KVCacheManager):

* The cache is ``num_blocks`` blocks of ``block_size`` token slots.
* Every *full* block of a request's tokens gets a chained hash
  ``hash((parent_hash, tokens_in_block, extra_keys))``; ``extra_keys`` carries
  the ``cache_salt`` for the first block only - the chain propagates it to all
  later blocks, exactly as vLLM does.
* A block is *in use* while any running request references it (ref_cnt > 0).
  When its last user finishes it goes to the tail of an LRU free queue but
  keeps its hash, so a later request can still hit it.  Allocation pops from
  the head of that queue and evicts (un-hashes) whatever cached block is there.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable, Iterable, Optional, Sequence


class Block:
    """One KV block: id, reference count and (once full) its content hash."""

    __slots__ = ("block_id", "ref_cnt", "block_hash")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: Optional[int] = None


def hash_block(parent: Optional[int], tokens: Sequence[Hashable], extra: Any = None) -> int:
    """Chained block hash; ``extra`` holds per-block extra keys such as cache_salt."""
    # Python's tuple hash is what vLLM used before switching to sha256 by
    # default; 64 bits is plenty inside one simulator process.
    return hash((parent, tuple(tokens), extra))


def extend_block_hashes(hashes: list[int], tokens: Sequence[Hashable], block_size: int,
                        cache_salt: Optional[str] = None) -> None:
    """Append hashes for any newly completed full blocks of ``tokens``."""
    for i in range(len(hashes), len(tokens) // block_size):
        parent = hashes[-1] if hashes else None
        extra = cache_salt if i == 0 else None  # salt only seeds the chain
        hashes.append(hash_block(parent, tokens[i * block_size:(i + 1) * block_size], extra))


class BlockPool:
    """Owns all blocks, the LRU free queue and the hash -> cached-block map."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.blocks = [Block(i) for i in range(num_blocks)]
        # Insertion order == eviction order: head is the least recently freed.
        self.free_queue: "OrderedDict[int, Block]" = OrderedDict((b.block_id, b) for b in self.blocks)
        self.cached: dict[int, Block] = {}
        self.num_evictions = 0

    @property
    def num_free(self) -> int:
        """Blocks not referenced by any running request (cached or empty)."""
        return len(self.free_queue)

    def usage(self) -> float:
        """Fraction of blocks held by running requests (vLLM's kv_cache_usage_perc)."""
        return (self.num_blocks - len(self.free_queue)) / self.num_blocks

    def lookup_prefix(self, hashes: Iterable[int]) -> list[Block]:
        """Return cached blocks for the longest cached prefix of ``hashes``."""
        hits = []
        for h in hashes:
            block = self.cached.get(h)
            if block is None:
                break
            hits.append(block)
        return hits

    def touch(self, blocks: Iterable[Block]) -> None:
        """Take a reference on (possibly free-but-cached) blocks."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self.free_queue[block.block_id]
            block.ref_cnt += 1

    def allocate(self, n: int) -> list[Block]:
        """Pop ``n`` blocks from the LRU head, evicting their cached content."""
        if n > len(self.free_queue):
            raise RuntimeError("not enough free blocks")
        out = []
        for _ in range(n):
            _, block = self.free_queue.popitem(last=False)
            if block.block_hash is not None:
                # Only drop the map entry if it points at this very block.
                if self.cached.get(block.block_hash) is block:
                    del self.cached[block.block_hash]
                block.block_hash = None
                self.num_evictions += 1
            block.ref_cnt = 1
            out.append(block)
        return out

    def free(self, blocks: Iterable[Block]) -> None:
        """Drop references; unreferenced blocks join the LRU tail, still cached."""
        for block in blocks:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self.free_queue[block.block_id] = block

    def cache(self, block: Block, block_hash: int) -> None:
        """Register a full block under its hash (first writer wins, like vLLM)."""
        if block.block_hash is not None:
            return
        block.block_hash = block_hash
        self.cached.setdefault(block_hash, block)

    def num_cached_blocks(self) -> int:
        """Number of distinct cached block hashes currently resident."""
        return len(self.cached)


class KVCacheManager:
    """Per-request view of the pool: prefix lookup, slot allocation, freeing.

    Requests are duck-typed: they need ``all_tokens``, ``block_hashes``,
    ``blocks``, ``num_cached_blocks`` and ``num_computed_tokens`` attributes.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True) -> None:
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_blocks)

    def usage(self) -> float:
        """Fraction of KV blocks held by running requests."""
        return self.pool.usage()

    def blocks_needed(self, num_tokens: int) -> int:
        """Number of blocks needed to hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)

    def get_computed_blocks(self, req: Any) -> tuple[list[Block], int]:
        """Longest cached prefix for a waiting request, as (blocks, num_tokens)."""
        if not self.enable_caching:
            return [], 0
        # The last token must always be recomputed to produce logits, so a
        # full-prompt hit is capped one token short (whole blocks only).
        max_blocks = (len(req.all_tokens) - 1) // self.block_size
        if not max_blocks:
            return [], 0  # a prompt within one block: nothing to look up
        hits = self.pool.lookup_prefix(req.block_hashes[:max_blocks])
        return hits, len(hits) * self.block_size

    def allocate_slots(self, req: Any, total_tokens: int,
                       computed_blocks: Sequence[Block] = ()) -> bool:
        """Ensure ``req`` holds blocks for ``total_tokens`` tokens; False if it can't."""
        if not computed_blocks and total_tokens <= len(req.blocks) * self.block_size:
            return True  # decode fast path: the current last block still has room
        # blocks_needed(), max() and num_free inlined: this runs on every admission.
        need = -(-total_tokens // self.block_size) - len(req.blocks) - len(computed_blocks)
        # Cache hits sitting in the free queue stop being free once touched.
        evictable_hits = sum(1 for b in computed_blocks if b.ref_cnt == 0) if computed_blocks else 0
        if (need if need > 0 else 0) + evictable_hits > len(self.pool.free_queue):
            return False
        if computed_blocks:
            self.pool.touch(computed_blocks)
            req.blocks.extend(computed_blocks)
            req.num_cached_blocks = len(req.blocks)
        if need > 0:
            req.blocks.extend(self.pool.allocate(need))
        return True

    def cache_full_blocks(self, req: Any) -> None:
        """Publish blocks that are now full of computed tokens to the prefix cache."""
        if not self.enable_caching:
            return
        num_full = min(req.num_computed_tokens // self.block_size, len(req.block_hashes))
        if num_full <= req.num_cached_blocks:
            return
        for i in range(req.num_cached_blocks, num_full):
            self.pool.cache(req.blocks[i], req.block_hashes[i])
        req.num_cached_blocks = max(req.num_cached_blocks, num_full)

    def free(self, req: Any) -> None:
        """Release a request's blocks; tail blocks first so they're evicted first."""
        self.pool.free(reversed(req.blocks))
        req.blocks = []
        req.num_cached_blocks = 0
