"""`local`: real vLLM (CPU build) processes from .venv-engine on this host."""
from pathlib import Path

from django.conf import settings

from fleet.runtime.process_backend import ProcessBackend

VLLM_MODULE = "vllm.entrypoints.openai.api_server"


class LocalBackend(ProcessBackend):
    name = "local"
    extra_env = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

    def argv(self, instance, port: int) -> list[str]:
        from models_registry.artifacts import local_model_path
        from models_registry.engine_args import render_vllm_argv

        version = instance.deployment.model_version
        flags = render_vllm_argv(version, model_path=str(local_model_path(version)),
                                 served_model_name=version.model.name, port=port, host=self.host, cpu=True)
        if flags and not flags[0].startswith("-"):  # already a full command line
            return list(flags)
        return [settings.SWITCHYARD_ENGINE_PYTHON, "-m", VLLM_MODULE, *flags]

    @property
    def start_deadline_seconds(self) -> float:
        """vLLM start-up (≈45 s idle) stretches a lot on a busy CPU host, so operators tune it."""
        return float(settings.SWITCHYARD_FLEET_START_DEADLINE_SECONDS)

    def engine_available(self) -> bool:
        return Path(settings.SWITCHYARD_ENGINE_PYTHON).exists()
