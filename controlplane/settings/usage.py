"""Usage retention and roll-ups, and the weights that turn tokens into engine cost."""
from controlplane.env import env_float, env_int

# --- Usage and cost (docs/usage-and-cost.md) ---
SWITCHYARD_USAGE_RETENTION_DAYS = env_int("SWITCHYARD_USAGE_RETENTION_DAYS", 30, minimum=1, maximum=3660)
# Each periodic run recomputes this many most recent hours (the current one included): late events land.
SWITCHYARD_USAGE_RECOMPUTE_HOURS = env_int("SWITCHYARD_USAGE_RECOMPUTE_HOURS", 3, minimum=1, maximum=48)
SWITCHYARD_USAGE_PRUNE_BATCH = env_int("SWITCHYARD_USAGE_PRUNE_BATCH", 10_000, minimum=100, maximum=1_000_000)
SWITCHYARD_USAGE_PRUNE_MAX_BATCHES = env_int("SWITCHYARD_USAGE_PRUNE_MAX_BATCHES", 100, minimum=1)
# Engine work = prefill weight × uncached prompt tokens + decode weight × completion tokens.
SWITCHYARD_COST_PREFILL_WEIGHT = env_float("SWITCHYARD_COST_PREFILL_WEIGHT", 1.0)
SWITCHYARD_COST_DECODE_WEIGHT = env_float("SWITCHYARD_COST_DECODE_WEIGHT", 4.0)
SWITCHYARD_COST_CPU_CORES_PER_INSTANCE = env_int("SWITCHYARD_COST_CPU_CORES_PER_INSTANCE", 4, minimum=1, maximum=1024)
