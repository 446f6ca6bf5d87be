"""From registry rows to the planner's inputs: a model version's architecture, a GPU type's memory and price."""
from django.core.exceptions import ValidationError

from capacity.architecture import Architecture, from_config, read_architecture
from capacity.planner import Gpu
from models_registry.artifacts import local_model_path


def version_dtype(version, *, cpu: bool) -> str:
    """The dtype the engine runs with: the version's, else float32 on CPU (as models_registry.engine_args renders)."""
    if version.dtype and version.dtype != "auto":
        return version.dtype
    return "float32" if cpu else "auto"


def version_architecture(version, *, cpu: bool = False) -> Architecture:
    """A registered version's architecture, read from config.json (and safetensors) in its artifact directory."""
    try:
        model_dir = local_model_path(version)
    except ValidationError as exc:
        raise ValidationError({"model_version": f"{' '.join(exc.messages)} Its config cannot be read here: "
                                                "pass the model's config.json as `config` instead."}) from exc
    engine_args = version.engine_args or {}
    return read_architecture(model_dir, name=str(version), dtype=version_dtype(version, cpu=cpu),
                             kv_cache_dtype=engine_args.get("kv_cache_dtype", "auto"),
                             quantization=version.quantization)


def config_architecture(config: dict, *, name: str, dtype: str = "auto", kv_cache_dtype: str = "auto",
                        quantization: str = "none") -> Architecture:
    """A pasted config.json (a model not registered, or stored remotely): weights estimated from it."""
    return from_config(config, name=name, dtype=dtype, kv_cache_dtype=kv_cache_dtype, quantization=quantization)


def gpu_of(gpu_type) -> Gpu:
    """The planner's view of a GpuType row, priced from the usage app's GPU price table."""
    price = gpu_type.current_price()
    return Gpu(name=gpu_type.name, memory_bytes=gpu_type.memory_bytes,
               hourly_usd=price.hourly_usd if price is not None else None)
