"""How people reach the console: single sign-on, password sign-in and its limits, invitations by e-mail."""
from controlplane.env import env_bool, env_int, env_json_object, env_str, env_str_or_file
from controlplane.oidc_setting import oidc_providers

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
