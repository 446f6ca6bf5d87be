"""The planner against a real CPU vLLM: its KV figures for tiny-coder match what the engine reports.

The session's engine serving tiny-coder with the registry's rendered flags and VLLM_CPU_KVCACHE_SPACE=1 (GiB,
tests/processes.py). vLLM logs its KV capacity at start-up ("CPU KV cache size: N tokens, Maximum
concurrency for L tokens per request: Cx", vllm/v1/core/kv_cache_utils.py) and exports
`vllm:cache_config_info` (block size and block count as labels). The planner is given what an operator
knows — the registered version and the KV space — and must agree within 10 %.
"""
import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from audit.actor import Actor
from capacity.inputs import version_architecture
from capacity.planner import GIB, PlanInputs, plan, seed_traffic
from tests.processes import VLLM_ENV

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
KV_LINE = re.compile(r"KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: "
                     r"([\d.]+)x")


@pytest.fixture
def tiny_coder(settings, tiny_model_dir, db):
    from models_registry.services import ensure_tiny_coder

    settings.SWITCHYARD_MODEL_ROOT = tiny_model_dir.parent
    return ensure_tiny_coder(model_dir=tiny_model_dir, actor=Actor.system("capacity-test"))


@pytest.fixture
def engine(tiny_coder, tiny_vllm):
    """The session's real engine (tests/conftest.py `tiny_vllm`: the registry's rendered flags for tiny-coder,
    the same as this version's); (its log since start-up, its /metrics text)."""
    return tiny_vllm.log_path.read_text(), httpx.get(tiny_vllm.url + "/metrics", timeout=60).text


def cache_config_info(metrics_text: str) -> dict:
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "vllm:cache_config_info":
            return dict(family.samples[0].labels)
    return {}


def within(planned: float, reported: float, tolerance: float = 0.10) -> bool:
    return abs(planned - reported) <= tolerance * reported


def test_kv_tokens_and_max_sequences_match_the_engine(engine, tiny_coder):
    log, metrics_text = engine
    found = KV_LINE.search(log)
    assert found, f"no KV capacity line in the engine's log:\n{log[-3000:]}"
    reported_tokens = int(found[1].replace(",", ""))
    reported_len, reported_concurrency = int(found[2].replace(",", "")), float(found[3])

    kv_space = int(VLLM_ENV["VLLM_CPU_KVCACHE_SPACE"]) * GIB
    architecture = version_architecture(tiny_coder, cpu=True)
    result = plan(PlanInputs(architecture=architecture, context_length=tiny_coder.engine_args["max_model_len"],
                             traffic=seed_traffic(50), kv_space_bytes=kv_space))
    print(f"planner: {result.kv_bytes_per_token} B/token, {result.kv_tokens} tokens, "
          f"{result.max_sequences_at_context} sequences of {result.max_model_len}; "
          f"vLLM: {reported_tokens} tokens, {reported_concurrency}x at {reported_len}")

    assert result.max_model_len == reported_len
    assert within(result.kv_tokens, reported_tokens)
    assert within(result.max_sequences_at_context, reported_concurrency)
    info = cache_config_info(metrics_text)
    assert info, "the engine exported no vllm:cache_config_info"
    print(f"vllm:cache_config_info: {info}")
    blocks, block_size = int(info["num_gpu_blocks"]), int(info["block_size"])
    # The bytes per token the engine's own block count implies for the KV space it was given.
    assert within(result.kv_bytes_per_token, kv_space / (blocks * block_size))
    assert within(result.kv_tokens, blocks * block_size)
