"""The engine's fast paths change nothing a client or a scrape can see.

Each scenario drives the engine step by step and records everything observable:
what every step scheduled (request and token count), generated tokens, usage,
prefix-cache hits, preemptions, finish reasons, KV usage and evictions, the
engine counters and the latency histograms (on a clock that reads the step
number).  The digests below were recorded with the engine as it was before its
per-token fast paths (commit 850d947); a change to any of those facts changes
the digest.  Block hashes are never recorded: Python salts string hashes per
process, and only their equality matters.
"""

from __future__ import annotations

import hashlib

import pytest

from simulator.config import SimulatorConfig
from simulator.engine import Engine
from simulator.metrics import SimulatorMetrics
from simulator.request import Request


def make_engine(**overrides) -> Engine:
    """Engine with a step-number clock and metrics attached."""
    cfg = dict(served_model_name="m", block_size=4, num_gpu_blocks=64, max_num_seqs=8,
               max_num_batched_tokens=64, prefill_ms_per_token=0, decode_ms_per_token=0)
    cfg.update(overrides)
    engine = Engine(SimulatorConfig(**cfg), SimulatorMetrics("m"))
    engine._clock = lambda: engine.num_steps * 0.01
    return engine


def prompt(i: int, n: int, shared: int) -> list[str]:
    """``shared`` leading tokens common to all requests, then private ones."""
    return [f"s{j}" for j in range(min(shared, n))] + [f"r{i}-{j}" for j in range(n - min(shared, n))]


def snapshot(engine: Engine) -> tuple:
    """Engine-wide observable state after a step."""
    s = engine.stats
    return (round(engine.kv.usage(), 9), engine.kv.pool.num_free, engine.kv.pool.num_evictions,
            engine.kv.pool.num_cached_blocks(), s.prompt_tokens, s.generation_tokens,
            s.prefix_cache_queries, s.prefix_cache_hits, s.num_preemptions, tuple(s.finished.items()),
            len(engine.waiting), tuple(r.request_id for r in engine.running))


def streamed(r: Request) -> tuple:
    """Items a streaming consumer got, in order (None ends the stream)."""
    items = []
    while r.queue is not None and not r.queue.empty():
        items.append(r.queue.get_nowait())
    return tuple(items)


def request_facts(r: Request) -> tuple:
    """Per-request facts a client sees (tokens, stream, usage, cache hits, timings)."""
    return (r.request_id, streamed(r), tuple(r.all_tokens), r.num_prompt_tokens, r.num_output_tokens,
            r.num_cached_tokens, r.num_preemptions, r.finish_reason,
            r.scheduled_time, r.first_token_time, r.finished_time)


def run_trace(engine: Engine, arrivals: dict, aborts: dict, limit: int = 3000,
              quiet_one_by_one: bool = False) -> str:
    """Step until idle, enqueueing ``arrivals[step]`` and aborting ``aborts[step]`` mid-step.

    ``quiet_one_by_one``: a step that ``quiet_steps()`` announces as quiet runs as
    ``fast_forward(1)`` instead of schedule() + update().
    """
    trace, reqs = [], []
    for step in range(limit):
        for r in arrivals.get(step, ()):
            engine.enqueue(r)
            reqs.append(r)
        if not engine.running and not len(engine.waiting) and step > max(arrivals, default=0):
            break
        if quiet_one_by_one and engine.quiet_steps() > 0 and step not in aborts:
            trace.append(tuple((r.request_id, 1) for r in engine.running))
            engine.fast_forward(1)
            FAST_FORWARDED[0] += 1
            trace.append(snapshot(engine))
            continue
        scheduled = engine.schedule()
        trace.append(tuple((r.request_id, n) for r, n in scheduled.items()))
        for r in aborts.get(step, ()):
            engine.abort(r)  # the client left while the step was "on the GPU"
        engine.update(scheduled)
        trace.append(snapshot(engine))
    trace.append(tuple(request_facts(r) for r in reqs))
    trace.append(tuple((h.name, tuple(h.counts), round(h.sum, 6)) for h in engine.metrics.histograms))
    return hashlib.sha256(repr(trace).encode()).hexdigest()[:16]


FAST_FORWARDED = [0]  # steps run by fast_forward(1) in quiet_one_by_one traces


def scenario(name: str, **run_options) -> str:
    """Build and run one named workload; returns its trace digest."""
    engine, arrivals, aborts = SCENARIOS[name]()
    return run_trace(engine, arrivals, aborts, **run_options)


def _steady(seed0: int, prompt_len: int, max_tokens: int, n: int = 24, shared: int = 8, **cfg) -> tuple:
    engine = make_engine(**cfg)
    arrivals: dict = {}
    for i in range(n):  # three arrivals per step
        arrivals.setdefault(i // 3, []).append(
            Request(f"q{i}", prompt(i, prompt_len, shared), max_tokens, seed=seed0 + i, priority=i % 3))
    return engine, arrivals, {}


def _pressure(policy: str) -> tuple:
    # Few blocks: decodes run out of KV and preempt, re-admissions hit the prefix cache.
    engine = make_engine(num_gpu_blocks=14, max_model_len=56, scheduling_policy=policy,
                         max_num_batched_tokens=12)
    arrivals = {}
    for i in range(12):
        r = Request(f"p{i}", prompt(i, 3 + (i * 5) % 11, 6), 5 + (i * 7) % 13, seed=i,
                    priority=(i * 2) % 3, cache_salt="salt" if i % 4 == 0 else None)
        arrivals.setdefault(i // 2, []).append(r)
    return engine, arrivals, {}


def _aborts_and_eos() -> tuple:
    engine = make_engine(num_gpu_blocks=20, scheduling_policy="priority")
    reqs = [Request(f"a{i}", prompt(i, 5 + i, 4), 12 + i, seed=100 + i, priority=i % 2,
                    eos_probability=0.15 if i % 2 else 0.0, stream=i % 3 == 0) for i in range(10)]
    arrivals = {0: reqs[:5], 2: reqs[5:]}
    return engine, arrivals, {3: [reqs[1], reqs[6]], 5: [reqs[2]], 6: [reqs[8]]}


def _no_caching() -> tuple:
    return _steady(7, 11, 9, enable_prefix_caching=False, num_gpu_blocks=30)


def _block_size_one() -> tuple:
    return _steady(3, 5, 6, n=9, block_size=1, num_gpu_blocks=80)


def _model_len_cap() -> tuple:
    return _steady(11, 9, 40, n=6, max_model_len=24)


SCENARIOS = {
    "bench-shape": lambda: _steady(1 << 32, 18, 16, n=60, shared=18, block_size=16, num_gpu_blocks=2048,
                                   max_num_batched_tokens=2048, max_num_seqs=256,
                                   scheduling_policy="priority"),
    # max_tokens right before, at and after block boundaries (block_size 4).
    "boundary-3": lambda: _steady(5, 8, 3),
    "boundary-4": lambda: _steady(5, 8, 4),
    "boundary-5": lambda: _steady(5, 8, 5),
    "boundary-prompt-7": lambda: _steady(9, 7, 9),
    "boundary-prompt-1": lambda: _steady(9, 1, 1),
    "chunked-prefill": lambda: _steady(2, 30, 7, max_num_batched_tokens=10),
    "fcfs": lambda: _steady(4, 13, 11, scheduling_policy="fcfs", max_num_seqs=3),
    "pressure-fcfs": lambda: _pressure("fcfs"),
    "pressure-priority": lambda: _pressure("priority"),
    "aborts-eos": _aborts_and_eos,
    "no-caching": _no_caching,
    "block-size-1": _block_size_one,
    "model-len-cap": _model_len_cap,
}

RECORDED = {
    'aborts-eos': 'fa3d166e9327b610',
    'bench-shape': '68cd362754c742fe',
    'block-size-1': '87470738c6de3d58',
    'boundary-3': 'f8fa7b6e7a0987c4',
    'boundary-4': 'f7483101005685dd',
    'boundary-5': '8dee8cba8b5a6fdd',
    'boundary-prompt-1': '9e7a5d0e649b03cd',
    'boundary-prompt-7': '9b40cb194a6b901d',
    'chunked-prefill': '70bf7f7ac62cfb45',
    'fcfs': '2939781a5c873b70',
    'model-len-cap': '28d979f62eee5583',
    'no-caching': 'c0ff35ba7b17c5c4',
    'pressure-fcfs': '920bfe4f56d77a3f',
    'pressure-priority': 'ae14a85ab0575018',
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_engine_trace_matches_recording(name):
    assert scenario(name) == RECORDED[name]
