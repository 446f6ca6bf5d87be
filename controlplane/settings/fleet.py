"""Model artifacts, rollouts and the fleet: runtime backends, engine supervision, platform caps, host capacity."""
import tempfile
from pathlib import Path

from controlplane.backends_setting import runtime_backends
from controlplane.cpu_engine_env import cpu_bind_setting
from controlplane.env import env_float, env_int, env_json_object, env_port_range, env_str
from controlplane.settings.base import BASE_DIR, VAR_DIR

# Local model artifacts (paths and file: URIs) must live under this directory; relative to the repo.
SWITCHYARD_MODEL_ROOT = (BASE_DIR / env_str("SWITCHYARD_MODEL_ROOT", str(VAR_DIR / "models"))).resolve()

# --- Rollouts (docs/rollouts.md) ---
# How long a rollout waits for the new version's engines to be ready before it is aborted.
SWITCHYARD_ROLLOUT_START_DEADLINE_SECONDS = env_int("SWITCHYARD_ROLLOUT_START_DEADLINE_SECONDS", 1800, minimum=10)

# --- Fleet (docs/fleet.md) ---
# Runtime backends by name (docs/runtime-backends.md): each a class and the options its constructor takes.
# SWITCHYARD_RUNTIME_BACKENDS (JSON) adds entries or replaces these; `"name": null` removes one.
SWITCHYARD_RUNTIME_BACKENDS = runtime_backends(env_json_object("SWITCHYARD_RUNTIME_BACKENDS", {
    "local": {"class": "fleet.runtime.local.LocalBackend", "label": "Local vLLM processes"},
    "simulator": {"class": "fleet.runtime.simulator.SimulatorBackend", "label": "Simulated engine"},
}), "SWITCHYARD_RUNTIME_BACKENDS")
# Engines are tagged with this install's namespace and token (fleet/install.py); empty derives the
# namespace from the install id, unique per database. A sweep never touches another install's engines.
SWITCHYARD_FLEET_NAMESPACE = env_str("SWITCHYARD_FLEET_NAMESPACE", "")
SWITCHYARD_ENGINE_PYTHON = env_str("SWITCHYARD_ENGINE_PYTHON", str(BASE_DIR / ".venv-engine" / "bin" / "python"))
SWITCHYARD_ENGINE_LOG_DIR = Path(env_str("SWITCHYARD_ENGINE_LOG_DIR", str(VAR_DIR / "log" / "engines")))
SWITCHYARD_FLEET_BACKOFF_BASE_SECONDS = env_int("SWITCHYARD_FLEET_BACKOFF_BASE_SECONDS", 5, minimum=0, maximum=3600)
SWITCHYARD_FLEET_BACKOFF_MAX_SECONDS = env_int("SWITCHYARD_FLEET_BACKOFF_MAX_SECONDS", 300, minimum=0, maximum=86400)
SWITCHYARD_FLEET_STABLE_SECONDS = env_int("SWITCHYARD_FLEET_STABLE_SECONDS", 600, minimum=0)
SWITCHYARD_FLEET_HEALTH_FAILURES = env_int("SWITCHYARD_FLEET_HEALTH_FAILURES", 3, minimum=1, maximum=100)
SWITCHYARD_FLEET_PROBE_TIMEOUT_SECONDS = env_float("SWITCHYARD_FLEET_PROBE_TIMEOUT_SECONDS", 2.0)
# The one request the fleet sends an engine that just became ready (fleet/warmup.py): how long it may take.
SWITCHYARD_FLEET_WARM_UP_TIMEOUT_SECONDS = env_int("SWITCHYARD_FLEET_WARM_UP_TIMEOUT_SECONDS", 60,
                                                   minimum=1, maximum=120)
# Engines probed at once in a health pass, and the longest a pass may hold its lease (the task's time limit).
SWITCHYARD_FLEET_PROBE_CONCURRENCY = env_int("SWITCHYARD_FLEET_PROBE_CONCURRENCY", 16, minimum=1, maximum=256)
SWITCHYARD_FLEET_HEALTH_PASS_SECONDS = 60
SWITCHYARD_FLEET_START_DEADLINE_SECONDS = env_int("SWITCHYARD_FLEET_START_DEADLINE_SECONDS", 300, minimum=5)
SWITCHYARD_FLEET_DRAIN_DEADLINE_SECONDS = env_int("SWITCHYARD_FLEET_DRAIN_DEADLINE_SECONDS", 60, minimum=0)
SWITCHYARD_FLEET_STOP_GRACE_SECONDS = env_int("SWITCHYARD_FLEET_STOP_GRACE_SECONDS", 10, minimum=0, maximum=300)
# Platform caps, checked when a deployment is created or scaled (a tenant's quota policy may set its own).
SWITCHYARD_FLEET_MAX_REPLICAS_PER_DEPLOYMENT = env_int("SWITCHYARD_FLEET_MAX_REPLICAS_PER_DEPLOYMENT", 16,
                                                       minimum=1, maximum=64)
SWITCHYARD_FLEET_MAX_INSTANCES_PER_TENANT = env_int("SWITCHYARD_FLEET_MAX_INSTANCES_PER_TENANT", 32, minimum=0)
SWITCHYARD_FLEET_MAX_GPUS_PER_TENANT = env_int("SWITCHYARD_FLEET_MAX_GPUS_PER_TENANT", 64, minimum=0)
# Host capacity for local and simulator engines (fleet/runtime/capacity.py); 0 / -1 = measure the host.
SWITCHYARD_HOST_MEMORY_MB = env_int("SWITCHYARD_HOST_MEMORY_MB", 0, minimum=0)
SWITCHYARD_HOST_RESERVED_MEMORY_MB = env_int("SWITCHYARD_HOST_RESERVED_MEMORY_MB", 2048, minimum=0)
SWITCHYARD_HOST_CPUS = env_int("SWITCHYARD_HOST_CPUS", 0, minimum=0)
SWITCHYARD_HOST_RESERVED_CPUS = env_int("SWITCHYARD_HOST_RESERVED_CPUS", 0, minimum=0)
SWITCHYARD_HOST_GPUS = env_int("SWITCHYARD_HOST_GPUS", -1, minimum=-1)
SWITCHYARD_HOST_LOCK_FILE = env_str("SWITCHYARD_HOST_LOCK_FILE",
                                    str(Path(tempfile.gettempdir()) / "switchyard-host-capacity.lock"))
# One local vLLM engine: runtime without weights, the KV cache it is given, the cores it claims.
SWITCHYARD_ENGINE_BASE_MEMORY_MB = env_int("SWITCHYARD_ENGINE_BASE_MEMORY_MB", 2048, minimum=0)
SWITCHYARD_ENGINE_CPU_KVCACHE_GIB = env_int("SWITCHYARD_ENGINE_CPU_KVCACHE_GIB", 1, minimum=1, maximum=1024)
SWITCHYARD_ENGINE_CPUS = env_int("SWITCHYARD_ENGINE_CPUS", 1, minimum=0)
# Where local engines' ports come from (vLLM and simulator alike): below Linux's default ephemeral range
# (32768-60999), so that no outgoing connection on the host takes an engine's port between its pick and the
# engine's bind (docs/fleet.md, "Ports").
SWITCHYARD_ENGINE_PORTS = env_port_range("SWITCHYARD_ENGINE_PORTS", "22000-32767")
# vLLM's VLLM_CPU_OMP_THREADS_BIND for local engines: "nobind" (the kernel places them; SWITCHYARD_ENGINE_CPUS
# OpenMP threads each), "auto" (vLLM pins every engine to the same cores), or CPU lists: controlplane/cpu_engine_env.py.
SWITCHYARD_ENGINE_CPU_BIND = cpu_bind_setting(env_str("SWITCHYARD_ENGINE_CPU_BIND", "nobind"),
                                              "SWITCHYARD_ENGINE_CPU_BIND")
# A simulator sleeps rather than computes: it claims no core unless a load test says otherwise.
SWITCHYARD_SIMULATOR_MEMORY_MB = env_int("SWITCHYARD_SIMULATOR_MEMORY_MB", 64, minimum=1)
SWITCHYARD_SIMULATOR_CPUS = env_int("SWITCHYARD_SIMULATOR_CPUS", 0, minimum=0)
