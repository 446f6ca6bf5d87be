"""Property-based checks: random workloads keep the KV cache and scheduler consistent."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config import SimulatorConfig
from simulator.engine import Engine
from simulator.request import Request

BLOCKS, BS = 12, 4

request_spec = st.tuples(
    st.integers(0, 2),    # which shared prefix (0 = none)
    st.integers(1, 14),   # private prompt tokens
    st.integers(1, 20),   # max_tokens
    st.integers(0, 3),    # priority
    st.sampled_from([None, "salt"]),
)


def check_invariants(engine: Engine) -> None:
    """Refcounts match holders; free queue and held blocks partition the pool."""
    pool = engine.kv.pool
    holders = Counter(id(b) for r in engine.running for b in r.blocks)
    for block in pool.blocks:
        assert block.ref_cnt == holders.get(id(block), 0)
        assert (block.ref_cnt == 0) == (block.block_id in pool.free_queue)
    for h, block in pool.cached.items():
        assert block.block_hash == h
    assert len(engine.running) <= engine.config.max_num_seqs
    assert 0.0 <= engine.kv.usage() <= 1.0


@settings(max_examples=60, deadline=None, database=None)  # no .hypothesis/ dir
@given(specs=st.lists(request_spec, min_size=1, max_size=10),
       policy=st.sampled_from(["fcfs", "priority"]),
       max_seqs=st.integers(1, 4))
def test_random_workloads_finish_cleanly(specs, policy, max_seqs):
    engine = Engine(SimulatorConfig(block_size=BS, num_gpu_blocks=BLOCKS, max_model_len=BLOCKS * BS,
                                    max_num_seqs=max_seqs, scheduling_policy=policy,
                                    max_num_batched_tokens=16, prefill_ms_per_token=0,
                                    decode_ms_per_token=0))
    prefixes = {0: [], 1: [f"A{i}" for i in range(8)], 2: [f"B{i}" for i in range(8)]}
    reqs = []
    for i, (prefix, extra, max_tokens, priority, salt) in enumerate(specs):
        prompt = prefixes[prefix] + [f"r{i}-{j}" for j in range(extra)]
        req = Request(f"r{i}", prompt, max_tokens, priority=priority, cache_salt=salt)
        engine.enqueue(req)
        reqs.append(req)
    for _ in range(5000):
        if not engine.running and not len(engine.waiting):
            break
        engine.step()
        check_invariants(engine)
    assert all(r.finish_reason == "length" and r.num_output_tokens == r.max_tokens for r in reqs)
    assert engine.kv.usage() == 0.0
    assert engine.stats.generation_tokens == sum(r.max_tokens for r in reqs)
