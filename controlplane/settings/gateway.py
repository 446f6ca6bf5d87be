"""The gateway (`python -m gateway`): Redis, body and timeout limits, queues, usage spool, metrics, prompt samples."""
from controlplane.env import ImproperSetting, env_bool, env_float, env_int, env_str, env_str_or_file
from controlplane.settings.base import VAR_DIR
from controlplane.settings.data_stores import REDIS_URL

# --- Gateway (docs/gateway.md): the /v1 process, `python -m gateway`. ---
# No implicit server: without one the gateway refuses inference with a 503 (limits cannot be kept) and
# says why on /healthz; `make run` starts a private redis-server and sets this (docs/gateway.md).
SWITCHYARD_GATEWAY_REDIS_URL = env_str_or_file("SWITCHYARD_GATEWAY_REDIS_URL", REDIS_URL or "")
SWITCHYARD_GATEWAY_MAX_BODY_BYTES = env_int("SWITCHYARD_GATEWAY_MAX_BODY_BYTES", 32 * 1024 * 1024, minimum=1024)
SWITCHYARD_GATEWAY_CONNECT_TIMEOUT = env_float("SWITCHYARD_GATEWAY_CONNECT_TIMEOUT", 2.0)
SWITCHYARD_GATEWAY_FIRST_BYTE_TIMEOUT = env_float("SWITCHYARD_GATEWAY_FIRST_BYTE_TIMEOUT", 60.0)
SWITCHYARD_GATEWAY_IDLE_TIMEOUT = env_float("SWITCHYARD_GATEWAY_IDLE_TIMEOUT", 30.0)
SWITCHYARD_GATEWAY_REFRESH_SECONDS = env_float("SWITCHYARD_GATEWAY_REFRESH_SECONDS", 0.3)
# Changes reach the gateways on the change bus (Redis pub/sub, controlplane/change_bus.py); the version
# marker is polled every BACKSTOP seconds behind it, and every REFRESH seconds while the bus is down.
SWITCHYARD_GATEWAY_CHANGE_BUS = env_bool("SWITCHYARD_GATEWAY_CHANGE_BUS", True)
SWITCHYARD_GATEWAY_BACKSTOP_SECONDS = env_float("SWITCHYARD_GATEWAY_BACKSTOP_SECONDS", 5.0)
SWITCHYARD_GATEWAY_EJECT_AFTER_FAILURES = env_int("SWITCHYARD_GATEWAY_EJECT_AFTER_FAILURES", 3, minimum=1)
SWITCHYARD_GATEWAY_KEY_CACHE_SIZE = env_int("SWITCHYARD_GATEWAY_KEY_CACHE_SIZE", 10_000, minimum=10)
SWITCHYARD_GATEWAY_NEGATIVE_KEY_TTL = env_float("SWITCHYARD_GATEWAY_NEGATIVE_KEY_TTL", 2.0)
SWITCHYARD_GATEWAY_USAGE_FLUSH_SECONDS = env_float("SWITCHYARD_GATEWAY_USAGE_FLUSH_SECONDS", 1.0)
SWITCHYARD_GATEWAY_USAGE_BATCH = env_int("SWITCHYARD_GATEWAY_USAGE_BATCH", 500, minimum=1)
# Usage events the gateway could not write (the database away) wait here, shared by every gateway process
# of the install; the dead letter holds the rare event the database refused (docs/usage-and-cost.md).
SWITCHYARD_GATEWAY_USAGE_SPOOL_DIR = env_str("SWITCHYARD_GATEWAY_USAGE_SPOOL_DIR", str(VAR_DIR / "usage-spool"))
SWITCHYARD_GATEWAY_USAGE_SPOOL_MAX_BYTES = env_int("SWITCHYARD_GATEWAY_USAGE_SPOOL_MAX_BYTES", 1024 ** 3, minimum=0)
SWITCHYARD_GATEWAY_QUEUE_INFLIGHT_PER_INSTANCE = env_int("SWITCHYARD_GATEWAY_QUEUE_INFLIGHT_PER_INSTANCE", 64,
                                                         minimum=1)
SWITCHYARD_GATEWAY_QUEUE_MAX = env_int("SWITCHYARD_GATEWAY_QUEUE_MAX", 1000, minimum=0)
SWITCHYARD_GATEWAY_QUEUE_MAX_PER_TENANT = env_int("SWITCHYARD_GATEWAY_QUEUE_MAX_PER_TENANT", 100, minimum=0)
SWITCHYARD_GATEWAY_QUEUE_MAX_WAIT = env_float("SWITCHYARD_GATEWAY_QUEUE_MAX_WAIT", 30.0)
# A pool's slots and its tenants' turns shared by every gateway process through Redis (docs/routing.md);
# false: each process has the whole capacity and its own turns.
SWITCHYARD_GATEWAY_QUEUE_SHARED = env_bool("SWITCHYARD_GATEWAY_QUEUE_SHARED", True)
SWITCHYARD_GATEWAY_FALLBACK_FIRST_BYTE_MS = env_int("SWITCHYARD_GATEWAY_FALLBACK_FIRST_BYTE_MS", 500, minimum=1)
SWITCHYARD_GATEWAY_DEDUP_TTL_SECONDS = env_float("SWITCHYARD_GATEWAY_DEDUP_TTL_SECONDS", 60.0)
# An engine joining a pool gets up to this many recently routed prompt heads whose prefix-affinity home it
# becomes, to fill its prefix cache before their next requests (docs/routing.md); 0 turns it off.
SWITCHYARD_GATEWAY_PREFIX_WARMUP = env_int("SWITCHYARD_GATEWAY_PREFIX_WARMUP", 8, minimum=0)
SWITCHYARD_GATEWAY_PREFIX_WARMUP_TIMEOUT = env_float("SWITCHYARD_GATEWAY_PREFIX_WARMUP_TIMEOUT", 10.0)
# Request bodies (gateway/server/): the longest pause in one, the least average rate after that
# pause's worth of grace (bytes/s; 0 = off) and the most time one may take in all (s; 0 = off).
SWITCHYARD_GATEWAY_BODY_TIMEOUT = env_int("SWITCHYARD_GATEWAY_BODY_TIMEOUT", 30, minimum=1)
SWITCHYARD_GATEWAY_BODY_MIN_RATE = env_int("SWITCHYARD_GATEWAY_BODY_MIN_RATE", 1024, minimum=0)
SWITCHYARD_GATEWAY_BODY_DEADLINE = env_int("SWITCHYARD_GATEWAY_BODY_DEADLINE", 300, minimum=0)
# The gateway's /metrics listens apart from /v1 (SWITCHYARD_GATEWAY_METRICS_HOST / _PORT, read by
# `python -m gateway`); with a token set, a scrape must send it as `Authorization: Bearer <token>`.
SWITCHYARD_METRICS_TOKEN = env_str_or_file("SWITCHYARD_METRICS_TOKEN", "")
if SWITCHYARD_METRICS_TOKEN and len(SWITCHYARD_METRICS_TOKEN) < 16:
    raise ImproperSetting("SWITCHYARD_METRICS_TOKEN must be at least 16 characters (or unset)")
# The slow-requests page shows the start of each prompt, after redaction; 0 keeps no text at all.
SWITCHYARD_GATEWAY_PROMPT_SAMPLE_CHARS = env_int("SWITCHYARD_GATEWAY_PROMPT_SAMPLE_CHARS", 500,
                                                 minimum=0, maximum=10000)
SWITCHYARD_PROMPT_SAMPLE_RETENTION_HOURS = env_int("SWITCHYARD_PROMPT_SAMPLE_RETENTION_HOURS", 24, minimum=1)
