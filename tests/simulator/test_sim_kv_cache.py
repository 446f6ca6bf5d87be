"""Pure-Python tests of the paged KV cache and prefix caching (no HTTP)."""

from __future__ import annotations

from simulator.kv_cache import BlockPool, KVCacheManager, extend_block_hashes
from simulator.tokenizer import VOCAB, render_chat, tokenize

BS = 4


class FakeReq:
    """Minimal object with the attributes KVCacheManager needs."""

    def __init__(self, tokens, salt=None):
        self.all_tokens = list(tokens)
        self.block_hashes: list[int] = []
        self.blocks = []
        self.num_cached_blocks = 0
        self.num_computed_tokens = 0
        extend_block_hashes(self.block_hashes, self.all_tokens, BS, salt)


def run_prefill(kv: KVCacheManager, req: FakeReq) -> int:
    """Admit and fully 'compute' a request's prompt; returns cache-hit tokens."""
    hits, num_hit = kv.get_computed_blocks(req)
    assert kv.allocate_slots(req, len(req.all_tokens), hits)
    req.num_computed_tokens = len(req.all_tokens)
    kv.cache_full_blocks(req)
    return num_hit


def test_tokenizer_is_four_chars_per_token():
    assert tokenize("abcdefghij") == ["abcd", "efgh", "ij"]
    assert tokenize("") == []
    assert all(len(t) == 4 for t in VOCAB)
    assert render_chat([{"role": "user", "content": "hi"}]).endswith("<|assistant|>\n")


def test_block_hashes_chain_and_salt():
    toks = list(range(12))
    plain, salted, salted2, other = [], [], [], []
    extend_block_hashes(plain, toks, BS)
    extend_block_hashes(salted, toks, BS, "s1")
    extend_block_hashes(salted2, toks, BS, "s1")
    extend_block_hashes(other, [99] + toks[1:], BS)
    assert len(plain) == 3
    assert salted == salted2
    # Salt enters the first block only, but the chain carries it onward.
    assert all(a != b for a, b in zip(plain, salted))
    # A change in block 0 changes every later hash too (chaining).
    assert all(a != b for a, b in zip(plain, other))


def test_partial_block_is_not_hashed():
    hashes: list[int] = []
    extend_block_hashes(hashes, list(range(7)), BS)
    assert len(hashes) == 1


def test_prefix_hit_in_whole_blocks():
    kv = KVCacheManager(num_blocks=16, block_size=BS)
    first = FakeReq(range(10))
    assert run_prefill(kv, first) == 0
    kv.free(first)
    second = FakeReq(list(range(10)) + [77, 78])
    # 10 shared tokens -> 2 full shared blocks -> 8 cached tokens.
    assert run_prefill(kv, second) == 8


def test_full_prompt_hit_keeps_last_token_uncached():
    kv = KVCacheManager(num_blocks=16, block_size=BS)
    a = FakeReq(range(8))
    run_prefill(kv, a)
    kv.free(a)
    # An identical 2-block prompt may only reuse 1 block: the last token must run.
    assert run_prefill(kv, FakeReq(range(8))) == 4


def test_salted_requests_do_not_share_with_unsalted():
    kv = KVCacheManager(num_blocks=16, block_size=BS)
    run_prefill(kv, FakeReq(range(12)))
    assert run_prefill(kv, FakeReq(range(12), salt="tenant-a")) == 0
    assert run_prefill(kv, FakeReq(range(12), salt="tenant-a")) == 8
    assert run_prefill(kv, FakeReq(range(12), salt="tenant-b")) == 0


def test_running_requests_share_blocks_by_refcount():
    kv = KVCacheManager(num_blocks=8, block_size=BS)
    a, b = FakeReq(range(9)), FakeReq(range(9))
    run_prefill(kv, a)
    assert run_prefill(kv, b) == 8
    assert a.blocks[:2] == b.blocks[:2]
    assert a.blocks[0].ref_cnt == 2
    # 3 blocks for a + 1 private block for b.
    assert kv.usage() == 4 / 8


def test_usage_counts_only_held_blocks():
    kv = KVCacheManager(num_blocks=10, block_size=BS)
    req = FakeReq(range(10))
    run_prefill(kv, req)
    assert kv.usage() == 3 / 10
    kv.free(req)
    assert kv.usage() == 0.0
    assert kv.pool.num_cached_blocks() == 2  # freed but still cached


def test_lru_eviction_and_tail_first_order():
    pool = BlockPool(4)
    blocks = pool.allocate(4)
    for i, b in enumerate(blocks):
        pool.cache(b, 1000 + i)
    pool.free(reversed(blocks[:2]))  # request X: tail block freed first
    pool.free(reversed(blocks[2:]))  # request Y, freed later
    evicted = pool.allocate(1)[0]
    # Least recently freed request goes first, and within it its tail block.
    assert evicted is blocks[1]
    assert 1001 not in pool.cached and 1000 in pool.cached


def test_eviction_removes_prefix_hits():
    kv = KVCacheManager(num_blocks=4, block_size=BS)
    a = FakeReq(range(100, 109))
    run_prefill(kv, a)
    kv.free(a)
    for start in (200, 300, 400):
        other = FakeReq(range(start, start + 9))
        run_prefill(kv, other)
        kv.free(other)
    assert run_prefill(kv, FakeReq(range(100, 109))) == 0


def test_allocation_fails_when_cache_is_full():
    kv = KVCacheManager(num_blocks=3, block_size=BS)
    holder = FakeReq(range(8))
    run_prefill(kv, holder)  # holds 2 of 3 blocks
    big = FakeReq(range(50, 58))
    assert not kv.allocate_slots(big, 8)
    assert big.blocks == []
    assert kv.allocate_slots(big, 4)


def test_evictable_hits_count_against_free_blocks():
    kv = KVCacheManager(num_blocks=3, block_size=BS)
    a = FakeReq(range(9))
    run_prefill(kv, a)
    kv.free(a)  # 3 free blocks, 2 of them cached
    b = FakeReq(list(range(8)) + list(range(50, 58)))  # 16 tokens = 4 blocks
    hits, num_hit = kv.get_computed_blocks(b)
    assert num_hit == 8
    assert not kv.allocate_slots(b, 16, hits)  # 2 hits + 2 new > 3 blocks
    assert all(blk.ref_cnt == 0 for blk in hits)  # failed attempt took nothing
