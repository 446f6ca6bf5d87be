"""Where data lives: the SQL database (SQLite in var/ or PostgreSQL) and the Redis cache."""
import dj_database_url

from controlplane.env import env_float, env_int, env_str_or_file
from controlplane.settings.base import VAR_DIR

# --- Database: SQLite in var/ unless DATABASE_URL names PostgreSQL. ---
DATABASE_URL = env_str_or_file("DATABASE_URL")  # or DATABASE_URL_FILE: the URL holds a password
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)}
    # An unreachable host (not a refused port) would otherwise hold a connection attempt for minutes:
    # the gateway's cold key lookups answer 503 and its usage goes to the spool after this long instead.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", env_int("SWITCHYARD_DATABASE_CONNECT_TIMEOUT", 5, minimum=1, maximum=600))
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(VAR_DIR / "switchyard.sqlite3"),
            # IMMEDIATE makes every atomic block take the write lock up front, so the audit
            # chain's read-last-then-append cannot interleave between processes. WAL lets the
            # console, gateway and worker read while one of them writes, and commits without
            # creating and deleting a journal file each time; connections are kept like PostgreSQL's.
            # timeout: how long a write waits for another process's write lock before it fails (the
            # gateway then spools its usage: docs/usage-and-cost.md).
            "OPTIONS": {"transaction_mode": "IMMEDIATE",
                        "timeout": env_float("SWITCHYARD_SQLITE_TIMEOUT", 20.0),
                        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL"},
            "CONN_MAX_AGE": 60,
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: cache + Celery broker when REDIS_URL is set; otherwise no server needed. ---
REDIS_URL = env_str_or_file("REDIS_URL")
if REDIS_URL:
    # Keys are `sy:<install id>:cache:…` (controlplane/redis_keys.py): installs sharing a Redis never mix.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                          "KEY_FUNCTION": "controlplane.redis_keys.cache_key"}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
