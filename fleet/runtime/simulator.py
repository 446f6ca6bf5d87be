"""`simulator`: the vLLM-compatible simulated engine (`python -m simulator`), for demos and load tests."""
import sys

from django.conf import settings

from fleet.runtime.capacity import MIB, Need
from fleet.runtime.process_backend import ProcessBackend

VERSIONS_KEY = "versions"  # simulator_params["versions"][label]: parameters of one version's engines only


def simulator_flags(params: dict) -> list[str]:
    """{"max_num_seqs": 4, "enable_prefix_caching": False} → CLI flags of `python -m simulator`."""
    flags = []
    for key, value in sorted(params.items()):
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + flag[2:])
        else:
            flags += [flag, str(value)]
    return flags


def params_for_version(params: dict, label: str) -> dict:
    """The deployment's parameters, with those under `versions` → this version's label on top (fault injection
    per version: `{"versions": {"v2": {"error_rate": 0.2}}}`)."""
    merged = {k: v for k, v in params.items() if k != VERSIONS_KEY}
    merged.update((params.get(VERSIONS_KEY) or {}).get(label) or {})
    return merged


class SimulatorBackend(ProcessBackend):
    name = "simulator"
    start_deadline_seconds = 30.0

    def argv(self, instance, port: int) -> list[str]:
        version = instance.version
        return [sys.executable, "-m", "simulator", "--host", self.host, "--port", str(port),
                "--served-model-name", version.model.name,
                *simulator_flags(params_for_version(instance.deployment.simulator_params or {}, version.version))]

    def spec_errors(self, deployment) -> dict[str, str]:
        from fleet.validation import simulator_params_problem

        problem = simulator_params_problem(deployment.simulator_params or {})
        return {"simulator_params": problem} if problem else {}

    def estimate(self, instance) -> Need:
        """A small Python process (about 30 MB resident)."""
        return Need(memory_bytes=settings.SWITCHYARD_SIMULATOR_MEMORY_MB * MIB,
                    cpus=float(settings.SWITCHYARD_SIMULATOR_CPUS), gpus=0)
