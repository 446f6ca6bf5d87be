"""The vLLM flags a model version may set, their types, and the argv that starts an engine.

Names are the snake_case form of vLLM 0.32's CLI flags (`--max-num-seqs` → `max_num_seqs`);
tests check every entry against the real `api_server --help=all`. Anything not listed is
refused, so a typo fails at registration rather than as a crash-looping engine.
"""
import difflib
from dataclasses import dataclass

from django.core.exceptions import ValidationError


class Kind:
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    STR = "str"
    CHOICE = "choice"


@dataclass(frozen=True)
class Flag:
    kind: str
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    negatable: bool = True  # bool flags: vLLM accepts --no-FLAG
    gpu_only: bool = False  # dropped when rendering for the CPU engine
    help: str = ""


def _int(minimum=1, **kw):
    return Flag(Kind.INT, minimum=minimum, **kw)


def _bool(**kw):
    return Flag(Kind.BOOL, **kw)


def _choice(*choices, **kw):
    return Flag(Kind.CHOICE, choices=choices, **kw)


ENGINE_FLAGS: dict[str, Flag] = {
    # scheduling and batching
    "max_num_seqs": _int(help="sequences batched per engine step"),
    "max_num_batched_tokens": _int(help="tokens per engine step (prefill budget)"),
    "max_model_len": _int(help="context length served (prompt + completion)"),
    "scheduling_policy": _choice("fcfs", "priority", help="priority: lower request priority runs first"),
    "enable_chunked_prefill": _bool(),
    "long_prefill_token_threshold": _int(minimum=0),
    "async_scheduling": _bool(),
    # KV cache and prefix caching
    "enable_prefix_caching": _bool(),
    "prefix_caching_hash_algo": _choice("sha256", "sha256_cbor", "xxhash", "xxhash_cbor"),
    "block_size": _int(),
    "kv_cache_dtype": _choice("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"),
    "kv_cache_memory_bytes": _int(gpu_only=True),
    "gpu_memory_utilization": Flag(Kind.FLOAT, minimum=0.05, maximum=1.0, gpu_only=True),
    "num_gpu_blocks_override": _int(gpu_only=True),
    "cpu_offload_gb": Flag(Kind.FLOAT, minimum=0.0, gpu_only=True),
    # parallelism (one CPU engine is one process: these are GPU-only)
    "tensor_parallel_size": _int(gpu_only=True),
    "pipeline_parallel_size": _int(gpu_only=True),
    "data_parallel_size": _int(gpu_only=True),
    "distributed_executor_backend": _choice("mp", "ray", "uni", "external_launcher", gpu_only=True),
    "enable_expert_parallel": _bool(gpu_only=True),
    "disable_custom_all_reduce": _bool(gpu_only=True),
    "max_parallel_loading_workers": _int(),
    # model execution
    "enforce_eager": _bool(),
    "seed": _int(minimum=0),
    "max_logprobs": _int(minimum=0),
    "disable_sliding_window": _bool(),
    "disable_cascade_attn": _bool(),
    "load_format": _choice("auto", "pt", "safetensors", "npcache", "dummy", "sharded_state", "mistral",
                           "runai_streamer"),
    "tokenizer_mode": _choice("auto", "hf", "mistral"),
    # API server behaviour
    "enable_prompt_tokens_details": _bool(),
    "chat_template_content_format": _choice("auto", "openai", "string"),
    "enable_auto_tool_choice": _bool(),
    "tool_call_parser": Flag(Kind.STR),
    "reasoning_parser": Flag(Kind.STR),
    "disable_log_stats": _bool(negatable=False),
    "enable_log_requests": _bool(),
    "uvicorn_log_level": _choice("critical", "debug", "error", "info", "trace", "warning"),
}

# Real vLLM flags that are nonetheless not engine_args, and why (shown to whoever tries).
REFUSED_FLAGS: dict[str, str] = {
    "model": "set by Switchyard from the version's artifact_uri",
    "served_model_name": "set by Switchyard from the model's name",
    "host": "set by the runtime backend",
    "port": "set by the runtime backend",
    "api_key": "instances are reached only through the gateway; it injects no engine key here",
    "dtype": "use the version's dtype field",
    "quantization": "use the version's quantization field",
    "revision": "give it in the artifact URI (hf://org/repo@revision)",
    "trust_remote_code": "running code from a model repository is not allowed",
    "download_dir": "artifacts are staged by the runtime backend",
    "tokenizer": "the tokenizer ships with the artifact",
}


def flag_name(name: str) -> str:
    """`max_num_seqs` → `--max-num-seqs`."""
    return "--" + name.replace("_", "-")


def validate_engine_args(engine_args) -> dict:
    """Return `engine_args` if every flag is known and well-typed; else a ValidationError on `engine_args`."""
    if not isinstance(engine_args, dict):
        raise ValidationError({"engine_args": "Must be an object mapping vLLM flag names to values."})
    errors = [message for name, value in engine_args.items() if (message := _flag_error(name, value))]
    if errors:
        raise ValidationError({"engine_args": errors})
    return engine_args


def _flag_error(name, value) -> str | None:
    if not isinstance(name, str):
        return f"flag names must be strings, got {name!r}"
    if name in REFUSED_FLAGS:
        return f"'{name}' cannot be set in engine_args: {REFUSED_FLAGS[name]}"
    flag = ENGINE_FLAGS.get(name)
    if flag is None:
        return f"unknown vLLM flag '{name}'{_suggestion(name)}"
    return _value_error(name, flag, value)


def _suggestion(name: str) -> str:
    normalised = name.strip("-").replace("-", "_").lower()
    matches = difflib.get_close_matches(normalised, list(ENGINE_FLAGS), n=1, cutoff=0.6)
    return f" (did you mean {matches[0]}?)" if matches else ""


def _value_error(name: str, flag: Flag, value) -> str | None:
    expected = _type_error(flag, value)
    if expected:
        return f"'{name}' must be {expected}, got {value!r}"
    if flag.minimum is not None and value < flag.minimum:
        return f"'{name}' must be at least {flag.minimum}, got {value!r}"
    if flag.maximum is not None and value > flag.maximum:
        return f"'{name}' must be at most {flag.maximum}, got {value!r}"
    return None


def _type_error(flag: Flag, value) -> str | None:
    """What the value should have been, or None when it fits (bool is never taken as a number)."""
    if flag.kind == Kind.BOOL:
        return None if isinstance(value, bool) else "true or false"
    if flag.kind == Kind.INT:
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if flag.kind == Kind.FLOAT:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number"
    if flag.kind == Kind.CHOICE:
        return None if value in flag.choices else "one of " + ", ".join(flag.choices)
    return None if isinstance(value, str) and value.strip() else "a non-empty string"


def render_vllm_argv(version, *, model_path: str, served_model_name: str, port: int, host: str = "127.0.0.1",
                     cpu: bool = True, tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1) -> list[str]:
    """CLI arguments for `python -m vllm.entrypoints.openai.api_server` serving `version`.

    One renderer for every runtime backend: the local and the Kubernetes engines get the same flags.
    """
    from models_registry.profiles import effective_engine_args

    argv = ["--model", str(model_path), "--served-model-name", served_model_name, "--host", host, "--port", str(port)]
    argv += _dtype_args(version, cpu=cpu) + _quantization_args(version)
    if tensor_parallel_size > 1:
        argv += ["--tensor-parallel-size", str(tensor_parallel_size)]
    if pipeline_parallel_size > 1:
        argv += ["--pipeline-parallel-size", str(pipeline_parallel_size)]
    args = {"enable_prompt_tokens_details": True, **effective_engine_args(version)}
    # The deployment's sizes decide how many devices an engine gets (and what it requests from its
    # runtime): a version's own parallel flags would contradict them.
    for name in ("tensor_parallel_size", "pipeline_parallel_size"):
        args.pop(name, None)
    for name, value in args.items():
        flag = ENGINE_FLAGS[name]
        if not (cpu and flag.gpu_only):
            argv += _render_flag(name, flag, value)
    return argv


def _dtype_args(version, *, cpu: bool) -> list[str]:
    # The CPU engine's bf16/fp16 kernels need AVX512-BF16/FP16; float32 runs everywhere.
    if version.dtype and version.dtype != "auto":
        return ["--dtype", version.dtype]
    return ["--dtype", "float32"] if cpu else []


def _quantization_args(version) -> list[str]:
    from models_registry.models import Quantization

    return [] if version.quantization == Quantization.NONE else ["--quantization", version.quantization]


def _render_flag(name: str, flag: Flag, value) -> list[str]:
    if flag.kind != Kind.BOOL:
        return [flag_name(name), str(value)]
    if value:
        return [flag_name(name)]
    return ["--no-" + flag_name(name)[2:]] if flag.negatable else []
