"""Scheduler tests that drive the engine step by step (no HTTP, no clocks)."""

from __future__ import annotations

import asyncio

from simulator.config import SimulatorConfig
from simulator.engine import Engine
from simulator.request import Request


def make_engine(**overrides) -> Engine:
    """Engine with small, test-friendly defaults."""
    cfg = dict(served_model_name="m", block_size=4, num_gpu_blocks=64, max_num_seqs=4,
               prefill_ms_per_token=0, decode_ms_per_token=0)
    cfg.update(overrides)
    return Engine(SimulatorConfig(**cfg))


def req(name: str, n_prompt: int = 6, max_tokens: int = 3, **kw) -> Request:
    """A request whose prompt tokens are unique to ``name``."""
    return Request(name, [f"{name}{i}" for i in range(n_prompt)], max_tokens, **kw)


def run_until_idle(engine: Engine, limit: int = 1000) -> list[str]:
    """Step until no work is left; return request ids in completion order."""
    tracked = list(engine.waiting) + list(engine.running)
    order: list[str] = []
    for _ in range(limit):
        if not engine.running and not len(engine.waiting):
            break
        engine.step()
        order += [r.request_id for r in tracked if r.finished and r.request_id not in order]
    return order


def test_generates_exactly_max_tokens():
    engine = make_engine()
    r = req("a", max_tokens=5)
    engine.enqueue(r)
    run_until_idle(engine)
    assert r.finish_reason == "length"
    assert r.num_output_tokens == 5 and len(r.text()) == 20
    assert engine.kv.usage() == 0.0
    assert engine.stats.generation_tokens == 5 and engine.stats.prompt_tokens == 6


def test_one_token_per_step_after_prefill():
    engine = make_engine()
    r = req("a", max_tokens=4)
    engine.enqueue(r)
    engine.step()  # prefill samples the first token
    assert r.num_output_tokens == 1
    engine.step()
    assert r.num_output_tokens == 2


def test_max_num_seqs_bounds_running_and_queues_rest():
    engine = make_engine(max_num_seqs=2)
    for i in range(6):
        engine.enqueue(req(f"r{i}"))
    engine.step()
    assert len(engine.running) == 2 and len(engine.waiting) == 4
    assert run_until_idle(engine) == [f"r{i}" for i in range(6)]


def test_priority_policy_lets_urgent_request_overtake():
    engine = make_engine(max_num_seqs=1, scheduling_policy="priority")
    engine.enqueue(req("first", priority=5))
    engine.step()  # "first" is running now
    engine.enqueue(req("late1", priority=5))
    engine.enqueue(req("late2", priority=5))
    engine.enqueue(req("urgent", priority=0))
    assert run_until_idle(engine) == ["first", "urgent", "late1", "late2"]


def test_fcfs_policy_keeps_arrival_order():
    engine = make_engine(max_num_seqs=1)
    for name in ("a", "b", "c"):
        engine.enqueue(req(name))
    assert run_until_idle(engine) == ["a", "b", "c"]


def test_prefix_hit_skips_prefill_tokens():
    engine = make_engine()
    shared = [f"p{i}" for i in range(9)]
    a = Request("a", shared, 2)
    engine.enqueue(a)
    run_until_idle(engine)
    b = Request("b", shared + ["x"], 2)
    engine.enqueue(b)
    scheduled = engine.schedule()
    assert b.num_cached_tokens == 8
    assert scheduled[b] == 2  # only the uncached tail is prefilled
    assert engine.stats.prefix_cache_hits == 8


def test_chunked_prefill_respects_token_budget():
    engine = make_engine(max_num_batched_tokens=8)
    r = req("long", n_prompt=20, max_tokens=2)
    engine.enqueue(r)
    assert engine.step()[r] == 8
    assert engine.step()[r] == 8
    assert r.num_output_tokens == 0
    assert engine.step()[r] == 4
    assert r.num_output_tokens == 1


def test_step_duration_formula():
    engine = make_engine(prefill_ms_per_token=2.0, decode_ms_per_token=10.0, batch_alpha=0.5)
    prefill, d1, d2 = req("p", n_prompt=5), req("d1"), req("d2")
    for r in (d1, d2):
        r.num_computed_tokens = r.num_prompt_tokens  # pretend they are decoding
    # 5 prefill tokens * 2 ms + decode of 2 seqs: 10 * (1 + 0.5 * 1) = 15 ms.
    assert abs(engine.step_duration({prefill: 5, d1: 1, d2: 1}) - 0.025) < 1e-12


def test_kv_exhaustion_preempts_and_everything_still_finishes():
    # 4 blocks of 4 tokens; two requests each growing to 12 tokens cannot coexist.
    engine = make_engine(num_gpu_blocks=4, max_num_seqs=2, max_model_len=16)
    a, b = req("a", n_prompt=4, max_tokens=8), req("b", n_prompt=4, max_tokens=8)
    engine.enqueue(a)
    engine.enqueue(b)
    run_until_idle(engine)
    assert engine.stats.num_preemptions > 0
    assert a.finish_reason == b.finish_reason == "length"
    assert a.num_output_tokens == b.num_output_tokens == 8
    assert engine.kv.usage() == 0.0


def test_eos_probability_stops_early():
    engine = make_engine()
    r = req("a", max_tokens=50, eos_probability=1.0)
    engine.enqueue(r)
    run_until_idle(engine)
    assert r.finish_reason == "stop" and r.num_output_tokens == 1


def test_abort_frees_blocks_and_counts():
    engine = make_engine()
    r = req("a", max_tokens=50)
    engine.enqueue(r)
    engine.step()
    assert engine.kv.usage() > 0
    engine.abort(r)
    assert r.finish_reason == "abort" and not engine.running
    assert engine.kv.usage() == 0.0
    assert engine.stats.finished["abort"] == 1


def test_engine_loop_streams_tokens_asynchronously():
    async def scenario() -> list:
        engine = make_engine(decode_ms_per_token=1.0)
        r = req("s", max_tokens=3, stream=True)
        engine.add_request(r)
        items = [await r.queue.get() for _ in range(4)]
        assert await r.done == "length"
        await engine.stop()
        return items

    items = asyncio.run(scenario())
    assert items[-1] is None and all(isinstance(t, str) for t in items[:3])
