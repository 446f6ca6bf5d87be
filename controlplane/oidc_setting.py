"""SWITCHYARD_OIDC_PROVIDERS checked at start: each identity provider's fields (docs/sso.md).

Like backends_setting.py, only the shape is checked here (settings cannot import the sso app); a
secret may come from a file (`client_secret_file`, `scim_token_file`) so it stays out of the environment.
"""
from pathlib import Path

from controlplane.env import ImproperSetting


def oidc_providers(configured: dict) -> dict:
    """Check each provider's fields at start; a secret may come from a file (`client_secret_file`)."""
    required, optional = {"issuer", "client_id"}, {"label", "scopes", "groups_claim", "group_prefix", "scim_token"}
    checked = {}
    for name, fields in configured.items():
        if not isinstance(fields, dict) or not required <= set(fields):
            raise ImproperSetting(f"SWITCHYARD_OIDC_PROVIDERS[{name!r}] needs at least {sorted(required)}")
        fields = dict(fields)
        for secret in ("client_secret", "scim_token"):
            if f"{secret}_file" in fields:
                fields[secret] = Path(fields.pop(f"{secret}_file")).read_text().strip()
        unknown = set(fields) - required - optional - {"client_secret"}
        if unknown or "client_secret" not in fields:
            raise ImproperSetting(f"SWITCHYARD_OIDC_PROVIDERS[{name!r}]: unknown {sorted(unknown)} or no client_secret")
        checked[name] = {"label": name, **fields}
    return checked
