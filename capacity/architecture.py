"""A model's architecture facts for capacity planning, read from its Hugging Face `config.json` and weights.

KV-cache bytes per token = 2 (K and V) × layers × KV heads × head dim × bytes per KV element.
Weight bytes come from the safetensors headers when the files are there (exact), else from a
parameter count estimated from the config (stated as such in the plan).
"""
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from django.core.exceptions import ValidationError

# Bytes per element of a dtype name as configs and vLLM's --dtype spell them.
DTYPE_BYTES = {"float32": 4, "float": 4, "fp32": 4, "float16": 2, "half": 2, "fp16": 2, "bfloat16": 2, "bf16": 2,
               "fp8": 1, "float8_e4m3fn": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int8": 1}
# Bytes a quantized weight takes, scales and zero points included (AWQ / GPTQ 4-bit with group size
# 128 carry one fp16 scale and a packed zero point per 128 weights: ~0.53 bytes per weight).
QUANTIZED_WEIGHT_BYTES = {"awq": 0.53, "gptq": 0.53, "fp8": 1.0}
# Model types whose transformers config class ties the output layer to the embeddings unless told otherwise.
TIED_BY_DEFAULT = frozenset({"starcoder2", "gemma", "gemma2", "gpt2", "gpt_bigcode"})
MAX_CONFIG_BYTES = 1_000_000
MAX_CONFIG_INT = 10 ** 9  # layers, heads, sizes, vocabulary: far above any model, far below float overflow
MAX_HEADER_BYTES = 100_000_000  # a safetensors header is JSON; anything larger is not one


@dataclass(frozen=True)
class Architecture:
    """What the planner needs to know about a model."""

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    kv_dtype_bytes: int
    parameters: int
    weight_bytes: int
    max_positions: int | None = None
    weights_source: str = "config estimate"  # or "safetensors headers"

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_dtype_bytes


def _positive_int(config: dict, key: str) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValidationError({"config": f"config.json's {key} must be a positive integer, not {value!r}."[:300]})
    if value > MAX_CONFIG_INT:
        raise ValidationError({"config": f"config.json's {key} ({value}) is beyond any model's."[:300]})
    return value


def _required(config: dict, key: str) -> int:
    value = _positive_int(config, key)
    if value is None:
        raise ValidationError({"config": f"config.json has no {key}: cannot size the KV cache."})
    return value


def text_config(config: dict) -> dict:
    """Multimodal configs nest the language model's facts under `text_config`."""
    nested = config.get("text_config")
    return {**config, **nested} if isinstance(nested, dict) else config


def dtype_bytes(name: str | None, *, default: int = 2) -> int:
    """Bytes per element of `name` (config torch_dtype / vLLM dtype); `auto` or unknown: `default`."""
    if not name or str(name).lower() == "auto":
        return default
    key = str(name).lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise ValidationError({"dtype": f"Unknown dtype {name!r}; one of {', '.join(sorted(DTYPE_BYTES))} or auto."})
    return DTYPE_BYTES[key]


def kv_dtype_bytes(config: dict, *, dtype: str = "auto", kv_cache_dtype: str = "auto") -> int:
    """vLLM keeps the KV cache in the model's dtype unless --kv-cache-dtype says otherwise."""
    if kv_cache_dtype and kv_cache_dtype != "auto":
        return dtype_bytes(kv_cache_dtype)
    model_default = dtype_bytes(config.get("torch_dtype") or config.get("dtype"), default=2)
    return dtype_bytes(dtype, default=model_default)


def estimate_parameters(config: dict) -> int:
    """Parameters of a decoder-only transformer from its config (embeddings, attention, MLP, norms)."""
    hidden, layers = _required(config, "hidden_size"), _required(config, "num_hidden_layers")
    heads = _required(config, "num_attention_heads")
    kv_heads = _positive_int(config, "num_key_value_heads") or heads
    head_dim = _positive_int(config, "head_dim") or max(1, hidden // heads)
    vocab = _required(config, "vocab_size")
    intermediate = _positive_int(config, "intermediate_size") or 4 * hidden
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2  # q, o; k, v
    gated = str(config.get("hidden_act", "silu")).lower() in ("silu", "swiglu", "swish") \
        and config.get("mlp_type", "gated") != "default"
    mlp = (3 if gated else 2) * hidden * intermediate
    biases = (heads + 2 * kv_heads) * head_dim + hidden + intermediate + hidden if config.get("use_bias") else 0
    norms = 2 * hidden * (2 if str(config.get("norm_type", "")).startswith("layer") else 1)
    tied = config.get("tie_word_embeddings", config.get("model_type") in TIED_BY_DEFAULT)
    embeddings = vocab * hidden * (1 if tied else 2)
    return layers * (attention + mlp + biases + norms) + embeddings + hidden


def weight_bytes_for(parameters: int, *, dtype_size: int, quantization: str) -> int:
    """Bytes the weights take on the accelerator: quantized weights per QUANTIZED_WEIGHT_BYTES."""
    per_weight = QUANTIZED_WEIGHT_BYTES.get(quantization or "none", dtype_size)
    return math.ceil(parameters * per_weight)


def from_config(config: dict, *, name: str = "model", dtype: str = "auto", kv_cache_dtype: str = "auto",
                quantization: str = "none", weights: tuple[int, int] | None = None) -> Architecture:
    """The architecture of a config dict; `weights` = (parameters, bytes) when read from the files."""
    config = text_config(config)
    layers, heads = _required(config, "num_hidden_layers"), _required(config, "num_attention_heads")
    kv_heads = _positive_int(config, "num_key_value_heads") or heads
    head_dim = _positive_int(config, "head_dim") or _required(config, "hidden_size") // heads
    if head_dim < 1:
        raise ValidationError({"config": "hidden_size / num_attention_heads is below 1: give head_dim."})
    if quantization in ("", "none"):
        quantization = _config_quantization(config)
    weight_dtype = dtype_bytes(dtype, default=dtype_bytes(config.get("torch_dtype"), default=2))
    if weights is not None:
        parameters, size, source = weights[0], weights[1], "safetensors headers"
    else:
        parameters = estimate_parameters(config)
        size, source = weight_bytes_for(parameters, dtype_size=weight_dtype, quantization=quantization), \
            "config estimate"
    return Architecture(name=name, layers=layers, kv_heads=kv_heads, head_dim=head_dim,
                        kv_dtype_bytes=kv_dtype_bytes(config, dtype=dtype, kv_cache_dtype=kv_cache_dtype),
                        parameters=parameters, weight_bytes=size,
                        max_positions=_positive_int(config, "max_position_embeddings"), weights_source=source)


def _config_quantization(config: dict) -> str:
    method = (config.get("quantization_config") or {}).get("quant_method", "") if isinstance(
        config.get("quantization_config"), dict) else ""
    return str(method).lower() if str(method).lower() in QUANTIZED_WEIGHT_BYTES else "none"


def read_config(model_dir: Path) -> dict:
    """The directory's config.json, or a ValidationError saying why it cannot be read."""
    path = model_dir / "config.json"
    if not path.is_file():
        raise ValidationError({"model_version": f"No config.json in the artifact directory {model_dir}."})
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ValidationError({"model_version": "config.json is larger than 1 MB: not a model config."})
    try:
        config = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationError({"model_version": f"config.json is not valid JSON: {exc}"}) from exc
    if not isinstance(config, dict):
        raise ValidationError({"model_version": "config.json must hold a JSON object."})
    return config


def safetensors_weights(model_dir: Path) -> tuple[int, int] | None:
    """(parameters, bytes) summed over the directory's *.safetensors headers; None when there are none."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        return None
    parameters = size = 0
    for path in files:
        for name, tensor in _header(path).items():
            if name == "__metadata__" or not isinstance(tensor, dict):
                continue
            parameters += math.prod(tensor.get("shape") or [1])
            start, end = tensor.get("data_offsets", [0, 0])
            size += end - start
    return parameters, size


def _header(path: Path) -> dict:
    with path.open("rb") as handle:
        raw = handle.read(8)
        if len(raw) != 8:
            raise ValidationError({"model_version": f"{path.name} is not a safetensors file."})
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER_BYTES:
            raise ValidationError({"model_version": f"{path.name} has an implausible header."})
        try:
            header = json.loads(handle.read(length))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValidationError({"model_version": f"{path.name}'s header is not JSON."}) from exc
    return header if isinstance(header, dict) else {}


def read_architecture(model_dir: Path, *, name: str, dtype: str = "auto", kv_cache_dtype: str = "auto",
                      quantization: str = "none") -> Architecture:
    """A model directory's architecture: config.json, plus exact weight sizes from its safetensors files."""
    config = read_config(model_dir)
    return from_config(config, name=name, dtype=dtype, kv_cache_dtype=kv_cache_dtype, quantization=quantization,
                       weights=safetensors_weights(model_dir))
