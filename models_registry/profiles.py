"""Serving profiles: documented engine defaults per model family, overridden per version.

The numbers are starting points for one 24–80 GB GPU serving coding assistants (short
completion prompts, many concurrent IDEs); docs/models.md explains each. Architecture facts
are for the representative size named, and feed KV-cache capacity planning:
KV bytes per token = 2 (K and V) × layers × kv_heads × head_dim × bytes per element.
"""
from dataclasses import dataclass, field

from models_registry.models import ModelFamily, Quantization


@dataclass(frozen=True)
class ServingProfile:
    family: str
    representative: str
    layers: int
    kv_heads: int
    head_dim: int
    recommended_quantization: str
    engine_defaults: dict = field(default_factory=dict)

    def kv_bytes_per_token(self, bytes_per_element: int = 2) -> int:
        """KV-cache bytes one token occupies (fp16/bf16 by default)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_element


def _defaults(*, max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int,
              gpu_memory_utilization: float = 0.90) -> dict:
    # Prefix caching pays off for IDE traffic (the same file prefix on every keystroke);
    # priority scheduling lets interactive completions overtake batch refactoring.
    return {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
            "max_model_len": max_model_len, "gpu_memory_utilization": gpu_memory_utilization,
            "enable_prefix_caching": True, "scheduling_policy": "priority"}


PROFILES: dict[str, ServingProfile] = {
    ModelFamily.DEEPSEEK_CODER: ServingProfile(
        ModelFamily.DEEPSEEK_CODER, "deepseek-coder-6.7b", layers=32, kv_heads=32, head_dim=128,
        recommended_quantization=Quantization.AWQ,
        engine_defaults=_defaults(max_num_seqs=64, max_num_batched_tokens=8192, max_model_len=16384)),
    ModelFamily.QWEN_CODER: ServingProfile(
        ModelFamily.QWEN_CODER, "qwen2.5-coder-7b", layers=28, kv_heads=4, head_dim=128,
        recommended_quantization=Quantization.NONE,
        engine_defaults=_defaults(max_num_seqs=128, max_num_batched_tokens=8192, max_model_len=32768)),
    ModelFamily.CODELLAMA: ServingProfile(
        ModelFamily.CODELLAMA, "codellama-7b", layers=32, kv_heads=32, head_dim=128,
        recommended_quantization=Quantization.AWQ,
        engine_defaults=_defaults(max_num_seqs=64, max_num_batched_tokens=8192, max_model_len=16384)),
    ModelFamily.STARCODER2: ServingProfile(
        ModelFamily.STARCODER2, "starcoder2-7b", layers=32, kv_heads=4, head_dim=128,
        recommended_quantization=Quantization.NONE,
        engine_defaults=_defaults(max_num_seqs=128, max_num_batched_tokens=8192, max_model_len=16384)),
    ModelFamily.LLAMA: ServingProfile(
        ModelFamily.LLAMA, "llama-3.1-8b", layers=32, kv_heads=8, head_dim=128,
        recommended_quantization=Quantization.FP8,
        engine_defaults=_defaults(max_num_seqs=128, max_num_batched_tokens=8192, max_model_len=8192)),
    ModelFamily.OTHER: ServingProfile(
        ModelFamily.OTHER, "unknown", layers=32, kv_heads=8, head_dim=128,
        recommended_quantization=Quantization.NONE,
        engine_defaults=_defaults(max_num_seqs=32, max_num_batched_tokens=4096, max_model_len=4096)),
}


def profile_for(family: str) -> ServingProfile:
    """The family's profile; unknown families get the conservative `other` profile."""
    return PROFILES.get(family, PROFILES[ModelFamily.OTHER])


def effective_engine_args(version) -> dict:
    """The engine arguments a version runs with: its family's defaults, then its own engine_args."""
    return {**profile_for(version.model.family).engine_defaults, **(version.engine_args or {})}
