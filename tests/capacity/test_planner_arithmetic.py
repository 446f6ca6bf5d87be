"""The planner's figures for the four coder families, from their published configs, against the arithmetic.

Config numbers are the published `config.json` of each model on Hugging Face (looked up 2026-12-05):
- DeepSeek-Coder-6.7B: deepseek-ai/deepseek-coder-6.7b-base, as quoted verbatim by derivatives such as
  https://huggingface.co/juewang/deepseek-coder-6.7b-base-trt-int4-g64-hf/blame/main/config.json
- Qwen2.5-Coder-7B: Qwen/Qwen2.5-Coder-7B (https://huggingface.co/ashikshaffi08/fim-coder-v2/blob/main/config.json
  quotes it; the model card: 28 layers, 28 Q / 4 KV heads, 7.61B parameters)
- StarCoder2-7B: https://huggingface.co/bigcode/starcoder2-7b/blob/refs%2Fpr%2F4/config.json
- CodeLlama-7B: codellama/CodeLlama-7b-hf, https://huggingface.co/loubnabnl/CodeLlama-7b-hf/blob/73dc96d6ab888978c9ca0e3ee49acaba27996c32/config.json
Parameter counts are those the model pages state (7.61B, 6.74B, 7.17B, 6.74B).
"""
import math
from decimal import Decimal

import pytest

from capacity.architecture import estimate_parameters, from_config
from capacity.planner import GIB, Gpu, PlanInputs, plan, seed_traffic

MIB = 1024 * 1024
DEEPSEEK_CODER_6_7B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 11008, "max_position_embeddings": 16384, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "rope_scaling": {"factor": 4.0, "type": "linear"},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 32256}
QWEN25_CODER_7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "hidden_size": 3584,
    "intermediate_size": 18944, "max_position_embeddings": 32768, "num_attention_heads": 28,
    "num_hidden_layers": 28, "num_key_value_heads": 4, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "vocab_size": 152064}
STARCODER2_7B = {
    "architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2", "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 4608, "intermediate_size": 18432, "max_position_embeddings": 16384, "mlp_type": "default",
    "norm_type": "layer_norm", "num_attention_heads": 36, "num_hidden_layers": 32, "num_key_value_heads": 4,
    "sliding_window": 4096, "torch_dtype": "bfloat16", "use_bias": True, "vocab_size": 49152}
CODELLAMA_7B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 11008, "max_position_embeddings": 16384, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "rope_theta": 1000000, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 32016}

# name: (config, layers, kv heads, head dim, published parameters)
FAMILIES = {
    "deepseek-coder-6.7b": (DEEPSEEK_CODER_6_7B, 32, 32, 4096 // 32, 6.74e9),
    "qwen2.5-coder-7b": (QWEN25_CODER_7B, 28, 4, 3584 // 28, 7.61e9),
    "starcoder2-7b": (STARCODER2_7B, 32, 4, 4608 // 36, 7.17e9),
    "codellama-7b": (CODELLAMA_7B, 32, 32, 4096 // 32, 6.74e9),
}
L4 = Gpu("L4", 23034 * MIB, Decimal("0.80"))
A100_80G = Gpu("A100-80G", 81920 * MIB, Decimal("2.50"))


@pytest.mark.parametrize("name", FAMILIES)
def test_kv_bytes_per_token_is_two_times_layers_kv_heads_head_dim_and_two_bytes(name):
    config, layers, kv_heads, head_dim, _ = FAMILIES[name]
    architecture = from_config(config, name=name)
    assert (architecture.layers, architecture.kv_heads, architecture.head_dim) == (layers, kv_heads, head_dim)
    assert architecture.kv_dtype_bytes == 2  # bfloat16
    assert architecture.kv_bytes_per_token == 2 * layers * kv_heads * head_dim * 2


def test_the_four_families_kv_per_token_in_kib():
    kib = {name: from_config(config, name=name).kv_bytes_per_token // 1024 for name, (config, *_) in FAMILIES.items()}
    # Without grouped-query attention (32 KV heads) a token costs 8–9× what it costs with 4 KV heads.
    assert kib == {"deepseek-coder-6.7b": 512, "qwen2.5-coder-7b": 56, "starcoder2-7b": 64, "codellama-7b": 512}


@pytest.mark.parametrize("name", FAMILIES)
def test_parameters_estimated_from_the_config_match_the_published_count(name):
    config, *_, published = FAMILIES[name]
    assert abs(estimate_parameters(config) - published) <= 0.01 * published


@pytest.mark.parametrize("name", FAMILIES)
def test_tokens_and_sequences_per_gpu_follow_the_memory_budget(name):
    config, layers, kv_heads, head_dim, _ = FAMILIES[name]
    architecture = from_config(config, name=name)
    result = plan(PlanInputs(architecture=architecture, context_length=8192, traffic=seed_traffic(50), gpu=A100_80G,
                             gpu_memory_utilization=0.90, reserve_bytes=2 * GIB))
    per_token = 2 * layers * kv_heads * head_dim * 2
    kv_space = int(81920 * MIB * 0.90) - architecture.weight_bytes - 2 * GIB
    blocks = kv_space // (per_token * 16)
    assert result.memory.kv_cache == kv_space
    assert (result.kv_blocks, result.kv_tokens) == (blocks, blocks * 16)
    assert result.max_sequences_at_context == round(blocks * 16 / 8192, 2)
    assert result.sequences_at_typical_length == blocks * 16 // 1568  # 1500 + 64 tokens take 98 whole blocks


def test_qwen_coder_on_l4_for_50_developers_worked_through():
    """The plan docs/capacity-planning.md walks through, figure by figure."""
    architecture = from_config(QWEN25_CODER_7B, name="qwen2.5-coder-7b")
    weights = math.ceil(estimate_parameters(QWEN25_CODER_7B) * 2)
    assert architecture.weight_bytes == weights  # ≈ 14.2 GiB of bf16 weights
    result = plan(PlanInputs(architecture=architecture, context_length=16384, traffic=seed_traffic(50), gpu=L4))
    kv_space = int(23034 * MIB * 0.9) - weights - 2 * GIB  # ≈ 4.0 GiB
    tokens = kv_space // (57344 * 16) * 16
    assert result.kv_tokens == tokens and 70_000 < tokens < 80_000
    assert result.fits  # one 16k sequence fits
    assert result.max_sequences_at_context == round(tokens / 16384, 2)
    at_typical = tokens // 1568
    assert result.sequences_at_typical_length == at_typical
    assert result.max_num_seqs == at_typical - at_typical % 8
    assert result.max_num_batched_tokens == 8192
    # 50 developers × 0.24 = 12 in flight at peak; one replica holds max_num_seqs of them; N+1.
    assert result.replicas_for_peak == math.ceil(12 / result.max_num_seqs) == 1
    assert (result.replicas, result.gpus) == (2, 2)
    assert result.cost_per_month_usd == Decimal("0.80") * 2 * 730
    completions = 50 * 300 * 21
    assert result.cost_per_completion_usd == (Decimal("1168.00") / completions).quantize(Decimal("0.000001"))


def test_a_model_too_large_for_the_gpu_is_said_not_to_fit():
    architecture = from_config(DEEPSEEK_CODER_6_7B, name="deepseek-coder-6.7b")
    result = plan(PlanInputs(architecture=architecture, context_length=16384, traffic=seed_traffic(50), gpu=L4))
    # 20.2 GiB usable − 12.6 GiB weights − 2 GiB reserve ≈ 5.6 GiB: 11k tokens at 512 KiB each < 16k.
    assert not result.fits
    assert result.replicas == 0 and "would refuse to start" in result.notes[0]


def test_awq_frees_memory_for_the_cache():
    plain = from_config(DEEPSEEK_CODER_6_7B, name="ds")
    awq = from_config(DEEPSEEK_CODER_6_7B, name="ds", quantization="awq")
    assert awq.weight_bytes == math.ceil(plain.parameters * 0.53)
    inputs = {"context_length": 16384, "traffic": seed_traffic(50), "gpu": L4}
    assert plan(PlanInputs(architecture=awq, **inputs)).fits
    assert plan(PlanInputs(architecture=awq, **inputs)).kv_tokens > 2 * plan(PlanInputs(architecture=plain,
                                                                                          **inputs)).kv_tokens


def test_tensor_parallelism_splits_the_weights_and_adds_the_caches():
    architecture = from_config(CODELLAMA_7B, name="codellama-7b")
    single = plan(PlanInputs(architecture=architecture, context_length=4096, traffic=seed_traffic(50), gpu=L4))
    double = plan(PlanInputs(architecture=architecture, context_length=4096, traffic=seed_traffic(50), gpu=L4,
                             tensor_parallel_size=2))
    per_gpu = int(23034 * MIB * 0.9) - math.ceil(architecture.weight_bytes / 2) - 2 * GIB
    assert double.kv_space_bytes == 2 * per_gpu > 2 * single.kv_space_bytes
    assert double.gpus == 2 * double.replicas


def test_a_cpu_engine_is_sized_by_its_kv_space_alone():
    tiny = {"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
            "hidden_size": 128, "vocab_size": 3072, "torch_dtype": "float32", "max_position_embeddings": 2048}
    architecture = from_config(tiny, name="tiny-coder", dtype="float32")
    assert architecture.kv_bytes_per_token == 2 * 2 * 1 * 64 * 4 == 1024
    result = plan(PlanInputs(architecture=architecture, context_length=1024, traffic=seed_traffic(5),
                             kv_space_bytes=1 * GIB))
    assert result.memory is None and result.cost_per_month_usd is None
    assert result.kv_tokens == GIB // 1024 == 1_048_576
    assert result.max_sequences_at_context == 1024.0


def test_fp8_kv_cache_halves_the_bytes_per_token():
    assert from_config(QWEN25_CODER_7B, name="q", kv_cache_dtype="fp8").kv_bytes_per_token == 57344 // 2


def test_redundancy_and_a_measured_latency_bound_change_the_replica_count():
    architecture = from_config(QWEN25_CODER_7B, name="q")
    base = {"architecture": architecture, "context_length": 8192, "traffic": seed_traffic(200), "gpu": A100_80G}
    assert plan(PlanInputs(**base, redundancy=0)).replicas == 1
    bounded = plan(PlanInputs(**base, max_concurrency_per_replica=16))
    assert bounded.replicas_for_peak == math.ceil(200 * 0.24 / 16) == 3
    assert bounded.replicas == 4


@pytest.mark.parametrize("config, words", [
    ({**CODELLAMA_7B, "num_hidden_layers": 0}, "positive integer"),
    ({**CODELLAMA_7B, "num_hidden_layers": True}, "positive integer"),
    ({**CODELLAMA_7B, "hidden_size": 10 ** 30}, "beyond any model"),
    ({**CODELLAMA_7B, "hidden_size": 16, "num_attention_heads": 32}, "give head_dim"),
    ({k: v for k, v in CODELLAMA_7B.items() if k != "num_hidden_layers"}, "no num_hidden_layers"),
    ({**CODELLAMA_7B, "torch_dtype": "float7"}, "Unknown dtype"),
])
def test_a_config_that_cannot_describe_a_model_is_refused_with_the_reason(config, words):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match=words):
        from_config(config, name="bad")
