"""`local`: real vLLM (CPU build) processes from .venv-engine on this host."""
import json
from pathlib import Path

from django.conf import settings

from controlplane.cpu_engine_env import cpu_engine_env
from fleet.runtime.capacity import GIB, MIB, Need
from fleet.runtime.process_backend import ProcessBackend

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8": 1}


class LocalBackend(ProcessBackend):
    name = "local"

    def argv(self, instance, port: int) -> list[str]:
        from models_registry.artifacts import local_model_path
        from models_registry.engine_args import render_vllm_argv

        version = instance.version
        flags = render_vllm_argv(version, model_path=str(local_model_path(version)),
                                 served_model_name=version.model.name, port=port, host=self.host, cpu=True)
        if flags and not flags[0].startswith("-"):  # already a full command line
            return list(flags)
        return [settings.SWITCHYARD_ENGINE_PYTHON, "-m", VLLM_MODULE, *flags]

    def spec_errors(self, deployment) -> dict[str, str]:
        errors = super().spec_errors(deployment)
        if deployment.tensor_parallel_size > 1:
            errors["tensor_parallel_size"] = "The local CPU runtime runs one single-process engine per instance; use 1."
        elif deployment.pipeline_parallel_size > 1:
            errors["pipeline_parallel_size"] = ("The local CPU runtime runs one single-process engine per instance; "
                                                "use 1.")
        return errors

    def extra_env(self, instance) -> dict[str, str]:
        return cpu_engine_env(kv_cache_gib=settings.SWITCHYARD_ENGINE_CPU_KVCACHE_GIB,
                              bind=settings.SWITCHYARD_ENGINE_CPU_BIND, threads=settings.SWITCHYARD_ENGINE_CPUS)

    def estimate(self, instance) -> Need:
        """Runtime (Python, torch, the API server) + the KV cache we give it + the weights as loaded."""
        memory = (settings.SWITCHYARD_ENGINE_BASE_MEMORY_MB * MIB + settings.SWITCHYARD_ENGINE_CPU_KVCACHE_GIB * GIB
                  + weights_bytes(instance.version))
        return Need(memory_bytes=memory, cpus=settings.SWITCHYARD_ENGINE_CPUS, gpus=0)

    @property
    def start_deadline_seconds(self) -> float:
        """vLLM start-up (≈45 s idle) stretches a lot on a busy CPU host, so operators tune it."""
        return float(settings.SWITCHYARD_FLEET_START_DEADLINE_SECONDS)

    def engine_available(self) -> bool:
        return Path(settings.SWITCHYARD_ENGINE_PYTHON).exists()


def weights_bytes(version) -> int:
    """Bytes the weights take once loaded: their files, scaled from the stored dtype to the one served."""
    from models_registry.artifacts import local_model_path

    try:
        model_dir = local_model_path(version)
    except Exception:  # not (yet) on disk: start() will fail with the real reason
        return 0
    on_disk = sum(p.stat().st_size for p in model_dir.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    stored = DTYPE_BYTES.get(_stored_dtype(model_dir), 0)
    served = DTYPE_BYTES.get(version.dtype if version.dtype != "auto" else "float32", 0)  # CPU serves float32
    return on_disk * served // stored if stored and served else on_disk


def _stored_dtype(model_dir: Path) -> str:
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return ""
    return str(config.get("torch_dtype") or config.get("dtype") or "")
