"""Cookies, security headers and HTTPS, and the deploy checks silenced on purpose."""
from controlplane.env import ImproperSetting, env_bool, env_header, env_int

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
