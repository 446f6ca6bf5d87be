"""API keys (pepper, environment, rotation, rejected-key audit rows) and the signed audit trail's witnesses."""
from controlplane.env import ImproperSetting, env_choice, env_int, env_secret, env_str, env_str_or_file
from controlplane.settings.base import VAR_DIR

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
