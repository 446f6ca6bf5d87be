"""Fault injection for rollouts against a bad version: --error-rate fails a share of requests at once with
vLLM's 500, --latency-multiplier stretches every modeled step (a slower time to first token)."""
from __future__ import annotations

import asyncio

import httpx
import pytest
from sim_helpers import MODEL

from simulator.app import build_app
from simulator.config import SimulatorConfig


def _statuses_and_ttft(config: SimulatorConfig, count: int) -> tuple[list[int], list[float]]:
    async def scenario():
        app = build_app(config)
        statuses, steps = [], []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
            for n in range(count):
                resp = await client.post("/v1/completions", json={"model": MODEL, "prompt": f"p{n} " * 20,
                                                                   "max_tokens": 2})
                statuses.append(resp.status_code)
        steps = [app.engine.step_duration({object(): 40})]  # one prefill step of 40 tokens, as modeled
        await app.engine.stop()
        return statuses, steps

    return asyncio.run(scenario())


def test_error_rate_fails_about_that_share_with_vllms_500():
    statuses, _ = _statuses_and_ttft(SimulatorConfig(served_model_name=MODEL, error_rate=0.2, seed=7,
                                                     prefill_ms_per_token=0, decode_ms_per_token=0), 400)
    failed = statuses.count(500)
    assert set(statuses) == {200, 500}
    assert 40 <= failed <= 120  # 20 % of 400 = 80; a binomial 5 sigma is ±40


def test_error_rate_is_reproducible_for_a_seed_and_zero_fails_nothing():
    config = dict(served_model_name=MODEL, prefill_ms_per_token=0, decode_ms_per_token=0)
    first, _ = _statuses_and_ttft(SimulatorConfig(**config, error_rate=0.3, seed=3), 60)
    again, _ = _statuses_and_ttft(SimulatorConfig(**config, error_rate=0.3, seed=3), 60)
    healthy, _ = _statuses_and_ttft(SimulatorConfig(**config), 60)
    assert first == again
    assert healthy == [200] * 60


def test_latency_multiplier_stretches_the_modeled_prefill():
    _, (plain,) = _statuses_and_ttft(SimulatorConfig(served_model_name=MODEL, prefill_ms_per_token=1), 1)
    _, (slow,) = _statuses_and_ttft(SimulatorConfig(served_model_name=MODEL, prefill_ms_per_token=1,
                                                    latency_multiplier=3), 1)
    assert slow == pytest.approx(3 * plain)


@pytest.mark.parametrize("bad", [{"error_rate": 1.5}, {"error_rate": -0.1}, {"latency_multiplier": 0}])
def test_out_of_range_faults_are_refused(bad):
    with pytest.raises(ValueError):
        SimulatorConfig(**bad)


def test_the_cli_carries_the_fault_flags(start_simulator):
    base = start_simulator("--error-rate", "1", "--prefill-ms-per-token", "0", "--decode-ms-per-token", "0")
    resp = httpx.post(base + "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 1}, timeout=10)
    assert resp.status_code == 500 and resp.json()["error"]["code"] == 500
