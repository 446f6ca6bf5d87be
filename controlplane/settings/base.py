"""The Django core: paths, secrets, apps, middleware, templates, authentication, static files.

Every other settings module builds on BASE_DIR and VAR_DIR from here.
"""
from pathlib import Path

from whitenoise.compress import Compressor

from controlplane.env import env_bool, env_list, env_secret, env_str

# One directory deeper than the project package: controlplane/settings/base.py.
BASE_DIR = Path(__file__).resolve().parent.parent.parent
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
