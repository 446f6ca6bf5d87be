"""A real OpenID Connect provider for the SSO tests: django-oauth-toolkit with OIDC on, in its own process.

Started by tests/sso/conftest.py (`runserver` on a loopback port, its own SQLite file); the tests change
its users and groups with `idp_seed`, and make it misbehave (a forged signature, an expired or
wrong-audience ID token) by writing a word into IDP_MODE_FILE, which tests.oidc_provider.validators reads.
"""
import os
from pathlib import Path

from jwcrypto import jwk

STATE_DIR = Path(os.environ["IDP_STATE_DIR"])
SECRET_KEY = "test-only oidc provider " + "x" * 32
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "tests.oidc_provider.urls"
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions",
                  "oauth2_provider", "tests.oidc_provider"]
MIDDLEWARE = ["django.contrib.sessions.middleware.SessionMiddleware", "django.middleware.csrf.CsrfViewMiddleware",
              "django.contrib.auth.middleware.AuthenticationMiddleware"]
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
              "OPTIONS": {"context_processors": ["django.template.context_processors.request"]}}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(STATE_DIR / "idp.sqlite3")}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "/accounts/login/"
USE_TZ = True
# The session cookie of the provider must not collide with the console's on the same host (127.0.0.1).
SESSION_COOKIE_NAME = "idp_sessionid"
CSRF_COOKIE_NAME = "idp_csrftoken"


def _rsa_key() -> str:
    path = STATE_DIR / "idp-rsa.pem"
    if not path.exists():
        path.write_bytes(jwk.JWK.generate(kty="RSA", size=2048).export_to_pem(private_key=True, password=None))
    return path.read_text()


OAUTH2_PROVIDER = {
    "OIDC_ISS_ENDPOINT": os.environ["IDP_ISSUER"],
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": _rsa_key(),
    "PKCE_REQUIRED": True,
    "OAUTH2_VALIDATOR_CLASS": "tests.oidc_provider.validators.GroupsValidator",
    "SCOPES": {"openid": "OpenID Connect", "email": "E-mail address", "profile": "Profile", "groups": "Groups"},
    "ID_TOKEN_EXPIRE_SECONDS": 300,
    "OIDC_RP_INITIATED_LOGOUT_ENABLED": True,
    "OIDC_RP_INITIATED_LOGOUT_ALWAYS_PROMPT": False,
}
