"""Celery: the broker (Redis, or kombu's filesystem transport), the install's queue and the beat schedule."""
import hashlib

from controlplane.env import env_bool, env_str
from controlplane.redis_tls import broker_ssl_options
from controlplane.settings.base import VAR_DIR
from controlplane.settings.data_stores import DATABASES, REDIS_URL

# --- Celery: Redis when configured, else kombu's filesystem transport (no server). ---
CELERY_TIMEZONE = "UTC"
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_USE_SSL = broker_ssl_options(REDIS_URL)  # rediss://: verified like every other client
    CELERY_RESULT_BACKEND = None
    # Its keys carry `sy:<install id>:celery:` (kombu's global_keyprefix), added per connection by
    # controlplane/celery.py: the install id is in the database, which settings cannot read.
else:
    _broker_dir = VAR_DIR / "celery-broker"
    for _sub in ("queue", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT = "controlplane.broker:Transport"  # kombu's, writing messages atomically
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "data_folder_processed": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),  # kombu's default is ./control in the working directory
        # The worker polls the folder: at kombu's default (1 s) every task waited up to a second.
        "polling_interval": 0.1,
    }
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# Processes sharing a database are one install. Two installs may share a broker (one Redis, or a
# var/ with the filesystem broker): a queue and a beat schedule named after the database keep them
# from taking each other's tasks. The database's name, not its address, so aliases of one server agree.
_DATABASE_SCOPE = hashlib.sha256(
    f"{DATABASES['default']['ENGINE']}|{DATABASES['default']['NAME']}".encode()).hexdigest()[:12]
CELERY_TASK_DEFAULT_QUEUE = env_str("SWITCHYARD_CELERY_QUEUE", f"switchyard-{_DATABASE_SCOPE}")
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / f"celerybeat-schedule-{_DATABASE_SCOPE}")

# The whole beat schedule lives here. Every entry expires before its next run is due.
CELERY_BEAT_SCHEDULE = {
    "audit-verify-chain": {
        "task": "audit.verify_chain",
        "schedule": 3600.0,
        "options": {"expires": 3000},
    },
    "audit-witness-current-head": {
        "task": "audit.witness_current_head",
        "schedule": 300.0,
        "options": {"expires": 240},
    },
    "fleet-reconcile-all": {
        "task": "fleet.reconcile_all",
        "schedule": 15.0,
        "options": {"expires": 12},
    },
    "fleet-autoscale": {
        "task": "fleet.autoscale",
        "schedule": 5.0,
        "options": {"expires": 4},
    },
    "fleet-health-check": {
        "task": "fleet.health_check",
        "schedule": 5.0,
        "options": {"expires": 4},
    },
    "rollouts-step-all": {
        "task": "rollouts.step_all",
        "schedule": 5.0,
        "options": {"expires": 4},
    },
    "usage-roll-up-recent": {
        "task": "usage.roll_up_recent",
        "schedule": 300.0,
        "options": {"expires": 240},
    },
    "usage-prune-events": {
        "task": "usage.prune_events",
        "schedule": 3600.0,
        "options": {"expires": 3000},
    },
    "usage-enforce-budgets": {
        "task": "usage.enforce_budgets",
        "schedule": 60.0,
        "options": {"expires": 50},
    },
}
