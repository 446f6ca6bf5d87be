"""Switchyard settings: one module, every value from the environment (see docs/operations.md).

Defaults give the embedded single-machine setup: SQLite and generated secrets in var/, a
local-memory cache and a filesystem Celery broker, so nothing but Python is needed.
"""
import hashlib
import tempfile
from pathlib import Path

import dj_database_url
from whitenoise.compress import Compressor

from controlplane.backends_setting import runtime_backends
from controlplane.cpu_engine_env import cpu_bind_setting
from controlplane.env import (
    ImproperSetting,
    env_bool,
    env_choice,
    env_float,
    env_header,
    env_int,
    env_json_object,
    env_list,
    env_secret,
    env_str,
    env_str_or_file,
)
from controlplane.oidc_setting import oidc_providers
from controlplane.redis_tls import broker_ssl_options

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("SWITCHYARD_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_secret("SECRET_KEY", generated_in=VAR_DIR / "secrets")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "guardian",
    "audit",
    "tenants",
    "apikeys",
    "quotas",
    "models_registry",
    "usage",
    "fleet",
    "rollouts",
    "sso",
    "capacity",
    "console",
]

MIDDLEWARE = [
    "controlplane.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "controlplane.middleware.ContentSecurityPolicyMiddleware",
    # Static files are answered here, inside the security headers above and before sessions or CSRF.
    "controlplane.middleware.StaticFilesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
ASGI_APPLICATION = "controlplane.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

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

AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "sso.backend.SwitchyardOIDCBackend",  # answers only an OpenID Connect callback (docs/sso.md)
    "guardian.backends.ObjectPermissionBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
GUARDIAN_RAISE_403 = False
ANONYMOUS_USER_NAME = None  # no guardian anonymous user: anonymous callers hold no grants

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
# A container image collects static files at build, outside the writable var/ volume.
STATIC_ROOT = Path(env_str("SWITCHYARD_STATIC_ROOT", str(VAR_DIR / "static")))
STATICFILES_DIRS = [BASE_DIR / "static"]
# WhiteNoise serves STATIC_ROOT from the ASGI app: `manage.py collectstatic` (make run does it) writes
# each file under a content-hashed name with a gzip copy and a manifest; pages link the hashed names,
# which are cached for ever (a new version is a new name).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
# Source maps (the API docs' bundles ship 10 MB of them) are for a developer's tools, not for pages:
# compressing them was most of collectstatic's time.
WHITENOISE_SKIP_COMPRESS_EXTENSIONS = (*Compressor.SKIP_COMPRESS_EXTENSIONS, "map")

LOGIN_URL = "console:login"
LOGIN_REDIRECT_URL = "console:home"
LOGOUT_REDIRECT_URL = "console:login"

# --- Cookies and headers: secure by default; plain-HTTP local demo opts out. ---
SECURE_COOKIES = env_bool("SWITCHYARD_SECURE_COOKIES", False)
SESSION_COOKIE_SECURE = SECURE_COOKIES
CSRF_COOKIE_SECURE = SECURE_COOKIES
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = env_int("SWITCHYARD_SESSION_SECONDS", 8 * 3600, minimum=300)
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
TRUST_X_FORWARDED_FOR = env_bool("SWITCHYARD_TRUST_X_FORWARDED_FOR", False)
# HTTPS only once secure cookies say TLS is in front (docs/operations.md, "Serving over HTTPS"). HSTS is
# sent on HTTPS answers only; subdomains and preload bind the whole parent domain, so they are opt-in.
SECURE_HSTS_SECONDS = env_int("SWITCHYARD_HSTS_SECONDS", 365 * 24 * 3600 if SECURE_COOKIES else 0,
                              minimum=0, maximum=2 * 365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SWITCHYARD_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SWITCHYARD_HSTS_PRELOAD", False)
if SECURE_HSTS_PRELOAD and not (SECURE_HSTS_INCLUDE_SUBDOMAINS and SECURE_HSTS_SECONDS >= 365 * 24 * 3600):
    raise ImproperSetting("SWITCHYARD_HSTS_PRELOAD needs SWITCHYARD_HSTS_INCLUDE_SUBDOMAINS=true and "
                          "SWITCHYARD_HSTS_SECONDS of at least 31536000 (what the preload list accepts)")
SECURE_SSL_REDIRECT = env_bool("SWITCHYARD_SSL_REDIRECT", SECURE_COOKIES)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # probes speak plain HTTP to the pod or host
# Behind a TLS-terminating proxy: the header it sets to "https" (it must overwrite a client's own copy).
SECURE_PROXY_SSL_HEADER = env_header("SWITCHYARD_PROXY_SSL_HEADER", "https")

# `check --deploy` is clean in production; a check silenced here says why (tests/test_deploy_checks.py).
SILENCED_CHECK_REASONS = {}
if SECURE_HSTS_SECONDS and not SECURE_HSTS_INCLUDE_SUBDOMAINS:
    SILENCED_CHECK_REASONS["security.W005"] = (
        "includeSubDomains would force HTTPS on every other host under the parent domain, which this "
        "service does not own; opt in with SWITCHYARD_HSTS_INCLUDE_SUBDOMAINS=true")
if SECURE_HSTS_SECONDS and not SECURE_HSTS_PRELOAD:
    SILENCED_CHECK_REASONS["security.W021"] = (
        "preloading is a browser-vendor list for a whole registrable domain and hard to undo; it is the "
        "domain owner's decision: opt in with SWITCHYARD_HSTS_PRELOAD=true")
SILENCED_SYSTEM_CHECKS = list(SILENCED_CHECK_REASONS)

# --- REST API ---
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apikeys.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["controlplane.api.permissions.AdminApiAccess"],
    "DEFAULT_PAGINATION_CLASS": "controlplane.api.pagination.CappedPageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "controlplane.api.schema.SwitchyardAutoSchema",
    "EXCEPTION_HANDLER": "controlplane.api.exceptions.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # `?format=csv|jsonl` belongs to the audit export, not to DRF's renderer override.
    "URL_FORMAT_OVERRIDE": None,
    # ASCII JSON (non-ASCII as \u escapes): an error message that quotes the input ("\ud800" is not a valid
    # choice) must render even when the input held an unpaired surrogate, which UTF-8 cannot encode.
    "UNICODE_JSON": False,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Switchyard control plane API",
    "DESCRIPTION": "Tenants, members, API keys, quotas and the audit trail. See docs/api.md.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Every operation's error responses refer to these two bodies (controlplane/api/schema.py).
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "controlplane.api.schema.add_error_components"],
    "ENUM_NAME_OVERRIDES": {"KeyStateEnum": "apikeys.api.serializers.KEY_STATES",
                            "InstanceRoleEnum": "fleet.models.InstanceRole", "RoleEnum": "tenants.roles.Role",
                            "TenantStatusEnum": "tenants.models.TenantStatus"},
}

# --- Switchyard ---
SWITCHYARD_KEY_PEPPER = env_secret("SWITCHYARD_KEY_PEPPER", generated_in=VAR_DIR / "secrets")
SWITCHYARD_AUDIT_SIGNING_KEY = env_secret("SWITCHYARD_AUDIT_SIGNING_KEY", generated_in=VAR_DIR / "secrets")
# Witnesses of the signed chain head outside the database (docs/audit.md): an append-only JSON Lines
# file and/or an HTTP endpoint that gets one POST per head. Empty: no witness.
SWITCHYARD_AUDIT_WITNESS_FILE = env_str("SWITCHYARD_AUDIT_WITNESS_FILE", "")
SWITCHYARD_AUDIT_WITNESS_URL = env_str_or_file("SWITCHYARD_AUDIT_WITNESS_URL", "")
if SWITCHYARD_AUDIT_WITNESS_URL and not SWITCHYARD_AUDIT_WITNESS_URL.startswith(("http://", "https://")):
    raise ImproperSetting(f"SWITCHYARD_AUDIT_WITNESS_URL must be an http:// or https:// URL, got "
                          f"{SWITCHYARD_AUDIT_WITNESS_URL!r}")
SWITCHYARD_AUDIT_WITNESS_TIMEOUT_SECONDS = env_int("SWITCHYARD_AUDIT_WITNESS_TIMEOUT_SECONDS", 5, minimum=1, maximum=60)
SWITCHYARD_KEY_ENV = env_choice("SWITCHYARD_KEY_ENV", "live", ("live", "test", "dev"))
# Audit rows of rejected API keys: one per (prefix, reason) per window, at most MAX_ROWS per window
# (apikeys/rejections.py); 0 records every attempt.
SWITCHYARD_REJECTED_KEY_AUDIT_WINDOW_SECONDS = env_int("SWITCHYARD_REJECTED_KEY_AUDIT_WINDOW_SECONDS", 60,
                                                       minimum=0, maximum=24 * 3600)
SWITCHYARD_REJECTED_KEY_AUDIT_MAX_ROWS = env_int("SWITCHYARD_REJECTED_KEY_AUDIT_MAX_ROWS", 100, minimum=1)
SWITCHYARD_KEY_ROTATION_GRACE_SECONDS = env_int(
    "SWITCHYARD_KEY_ROTATION_GRACE_SECONDS", 24 * 3600, minimum=0, maximum=30 * 24 * 3600)
SWITCHYARD_DEFAULT_USER_RPM = env_int("SWITCHYARD_DEFAULT_USER_RPM", 120, minimum=1)
# How long an invitation to join a tenant stays open (tenants.services.invite_member).
SWITCHYARD_INVITATION_DAYS = env_int("SWITCHYARD_INVITATION_DAYS", 14, minimum=1, maximum=365)
# --- Single sign-on (docs/sso.md): OpenID Connect providers by name, e.g.
# {"okta": {"label": "Okta", "issuer": "https://acme.okta.com/oauth2/default", "client_id": "…",
#           "client_secret_file": "/run/secrets/okta", "groups_claim": "groups", "group_prefix": "switchyard"}}
SWITCHYARD_OIDC_PROVIDERS = oidc_providers(env_json_object("SWITCHYARD_OIDC_PROVIDERS", {}))
# Password sign-in on the console (and creating an account from an invitation link). Off: SSO only.
SWITCHYARD_LOCAL_SIGNIN = env_bool("SWITCHYARD_LOCAL_SIGNIN", True)
SWITCHYARD_OIDC_TIMEOUT_SECONDS = env_int("SWITCHYARD_OIDC_TIMEOUT_SECONDS", 10, minimum=1, maximum=60)
SWITCHYARD_OIDC_LEEWAY_SECONDS = env_int("SWITCHYARD_OIDC_LEEWAY_SECONDS", 30, minimum=0, maximum=300)
# mozilla-django-oidc: the flow's safeguards on, whatever the provider allows.
OIDC_USE_PKCE = True
OIDC_USE_NONCE = True
OIDC_STORE_ID_TOKEN = True  # for the provider's logout (id_token_hint)
OIDC_AUTHENTICATION_CALLBACK_URL = "console:sso-callback"
OIDC_CREATE_USER = True
LOGIN_URL_SSO_FAILED = "/console/login/?sso=failed"

# Where the console is reached from outside: the base of the links e-mails carry (invitations).
SWITCHYARD_CONSOLE_URL = env_str("SWITCHYARD_CONSOLE_URL", "http://127.0.0.1:8000").rstrip("/")

# --- E-mail (invitation links): printed to the console unless an SMTP server is configured. ---
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str_or_file("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Switchyard <switchyard@localhost>")

# Sign-in limits (console/login_throttle.py, docs/console.md): failures are counted per username and per
# address independently within the window; reaching a limit locks that username / address for LOCK_SECONDS.
SWITCHYARD_LOGIN_WINDOW_SECONDS = env_int("SWITCHYARD_LOGIN_WINDOW_SECONDS", 15 * 60, minimum=1, maximum=24 * 3600)
SWITCHYARD_LOGIN_LOCK_SECONDS = env_int("SWITCHYARD_LOGIN_LOCK_SECONDS", 15 * 60, minimum=1, maximum=24 * 3600)
SWITCHYARD_LOGIN_FAILURES_PER_USERNAME = env_int(  # the old name still works
    "SWITCHYARD_LOGIN_FAILURES_PER_USERNAME", env_int("SWITCHYARD_LOGIN_FAILURES_PER_15_MIN", 10, minimum=1), minimum=1)
SWITCHYARD_LOGIN_FAILURES_PER_IP = env_int("SWITCHYARD_LOGIN_FAILURES_PER_IP", 20, minimum=1)
# Local model artifacts (paths and file: URIs) must live under this directory; relative to the repo.
SWITCHYARD_MODEL_ROOT = (BASE_DIR / env_str("SWITCHYARD_MODEL_ROOT", str(VAR_DIR / "models"))).resolve()

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
# vLLM's VLLM_CPU_OMP_THREADS_BIND for local engines: "nobind" (the kernel places them; SWITCHYARD_ENGINE_CPUS
# OpenMP threads each), "auto" (vLLM pins every engine to the same cores), or CPU lists: controlplane/cpu_engine_env.py.
SWITCHYARD_ENGINE_CPU_BIND = cpu_bind_setting(env_str("SWITCHYARD_ENGINE_CPU_BIND", "nobind"),
                                              "SWITCHYARD_ENGINE_CPU_BIND")
# A simulator sleeps rather than computes: it claims no core unless a load test says otherwise.
SWITCHYARD_SIMULATOR_MEMORY_MB = env_int("SWITCHYARD_SIMULATOR_MEMORY_MB", 64, minimum=1)
SWITCHYARD_SIMULATOR_CPUS = env_int("SWITCHYARD_SIMULATOR_CPUS", 0, minimum=0)

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

LOG_LEVEL = env_choice("LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "controlplane.logging.RequestIdFilter"}},
    "formatters": {"json": {"()": "controlplane.logging.JsonFormatter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "json", "filters": ["request_id"]},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # The filesystem broker has no host; kombu warns about that on every connection.
        "kombu.connection": {"level": "WARNING" if REDIS_URL else "ERROR"},
    },
}
