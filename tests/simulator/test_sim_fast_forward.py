"""Zero-latency fast-forward: many quiet steps at once give what stepping one by one gives.

The engine skips whole runs of steps in which every running request only
samples one token (``quiet_steps`` / ``fast_forward``).  The recorded
workloads of test_sim_engine_equivalence, and workloads whose requests arrive
in groups (as zero-latency bursts see them), check it twice: step by step (a step
announced as quiet runs as ``fast_forward(1)``; the per-step trace digest must
not change) and in jumps as long as the workload allows (every fact a client
or a scrape sees at the end must be the same as without jumps).
"""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from test_sim_engine_equivalence import (
    FAST_FORWARDED,
    RECORDED,
    SCENARIOS,
    make_engine,
    prompt,
    request_facts,
    run_trace,
    scenario,
    snapshot,
)

from simulator.engine import Engine
from simulator.request import Request


def _cohorts(block_size: int, **cfg) -> tuple:
    """Groups arriving together, as zero-latency bursts see them: quiet steps in lockstep."""
    engine = make_engine(block_size=block_size, scheduling_policy="priority", **cfg)
    arrivals: dict = {}
    for i in range(24):
        r = Request(f"c{i}", prompt(i, 5 + (i * 7) % 23, 6), 12 + (i * 5) % 29, seed=i, priority=i % 3,
                    stream=i % 4 == 0, cache_salt="s" if i % 5 == 0 else None)
        arrivals.setdefault((0, 30, 31, 70)[i % 4], []).append(r)
    return engine, arrivals, {}


def _full_batch() -> tuple:
    """More arrivals than max_num_seqs: quiet steps while a queue waits for a free seat."""
    engine = make_engine(max_num_seqs=3, block_size=8)
    arrivals = {0: [Request(f"f{i}", prompt(i, 9, 9), 20 + i, seed=i) for i in range(8)]}
    return engine, arrivals, {}


def _cohort_aborts() -> tuple:
    engine = make_engine(block_size=8)
    reqs = [Request(f"x{i}", prompt(i, 8, 8), 40, seed=i, stream=i == 1) for i in range(4)]
    return engine, {0: reqs}, {12: [reqs[1]], 25: [reqs[3]]}


LOCKSTEP = {
    "cohorts-4": lambda: _cohorts(4),
    "cohorts-16": lambda: _cohorts(16, num_gpu_blocks=40),
    "cohorts-no-caching": lambda: _cohorts(8, enable_prefix_caching=False),
    "cohorts-tight-kv": lambda: _cohorts(4, num_gpu_blocks=24),
    "full-batch": _full_batch,
    "cohort-aborts": _cohort_aborts,
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_recorded_workloads_fast_forwarded_one_by_one_match_recording(name):
    assert scenario(name, quiet_one_by_one=True) == RECORDED[name]


@pytest.mark.parametrize("name", sorted(LOCKSTEP))
def test_lockstep_workloads_fast_forwarded_one_by_one_match_stepping(name):
    stepped = run_trace(*LOCKSTEP[name]())
    before = FAST_FORWARDED[0]
    assert run_trace(*LOCKSTEP[name](), quiet_one_by_one=True) == stepped
    assert FAST_FORWARDED[0] > before  # the fast path was taken, so this compared something


def final_facts(engine: Engine, arrivals: dict, aborts: dict, jump: bool) -> tuple[str, int]:
    """Run a workload to the end, jumping over quiet steps or not; (digest of final facts, jumps)."""
    reqs, jumps, step = [], 0, 0
    events = sorted(set(arrivals) | set(aborts))
    while True:
        for r in arrivals.get(step, ()):
            engine.enqueue(r)
            reqs.append(r)
        if not engine.running and not len(engine.waiting) and step > max(arrivals, default=0):
            break
        quiet = engine.quiet_steps() if jump and step not in aborts else 0
        if quiet > 0:
            upcoming = [e for e in events if e > step]
            n = min([quiet] + [e - step for e in upcoming[:1]])
            engine.fast_forward(n)
            step, jumps = step + n, jumps + 1
            continue
        scheduled = engine.schedule()
        for r in aborts.get(step, ()):
            engine.abort(r)
        engine.update(scheduled)
        step += 1
    facts = (engine.num_steps, snapshot(engine), tuple(request_facts(r) for r in reqs),
             tuple((h.name, tuple(h.counts), round(h.sum, 6)) for h in engine.metrics.histograms))
    return hashlib.sha256(repr(facts).encode()).hexdigest(), jumps


@pytest.mark.parametrize("name", sorted(SCENARIOS) + sorted(LOCKSTEP))
def test_jumping_over_quiet_steps_ends_with_the_same_facts(name):
    workload = SCENARIOS.get(name) or LOCKSTEP[name]
    stepped, _ = final_facts(*workload(), jump=False)
    jumped, jumps = final_facts(*workload(), jump=True)
    assert jumped == stepped
    if name in LOCKSTEP or name == "fcfs":
        assert jumps > 0


def test_eos_requests_are_never_fast_forwarded():
    engine = make_engine()
    engine.enqueue(Request("e", prompt(0, 5, 0), 30, seed=3, eos_probability=0.01))
    engine.step()
    engine.step()
    assert engine.running and engine.quiet_steps() == 0


def test_a_lone_zero_latency_request_runs_in_one_burst():
    async def scenario_() -> tuple[str, int]:
        engine = make_engine(block_size=16)
        r = Request("a", prompt(0, 16, 0), 16, seed=1)
        engine.add_request(r)
        reason = await r.done
        return reason, engine.num_steps

    reason, steps = asyncio.run(scenario_())
    assert reason == "length" and steps == 16  # every step counted, though most were skipped at once
