"""Configured OpenID Connect providers (SWITCHYARD_OIDC_PROVIDERS) and their discovery documents."""
import threading
import time
from dataclasses import dataclass

import requests
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

DISCOVERY_TTL_SECONDS = 3600
_discovered: dict[str, tuple[float, dict]] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class Provider:
    name: str
    label: str
    issuer: str
    client_id: str
    client_secret: str
    scopes: str = "openid email profile"
    groups_claim: str = "groups"
    group_prefix: str = "switchyard"
    scim_token: str = ""  # the bearer token this provider's SCIM client presents (sso/scim.py)

    def discovery(self) -> dict:
        """The provider's /.well-known/openid-configuration, cached for an hour; its issuer must be ours."""
        with _lock:
            cached = _discovered.get(self.issuer)
            if cached and time.monotonic() - cached[0] < DISCOVERY_TTL_SECONDS:
                return cached[1]
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        response = requests.get(url, timeout=settings.SWITCHYARD_OIDC_TIMEOUT_SECONDS)
        response.raise_for_status()
        document = response.json()
        if document.get("issuer") != self.issuer:
            raise ImproperlyConfigured(f"{url} names issuer {document.get('issuer')!r}, not {self.issuer!r}")
        with _lock:
            _discovered[self.issuer] = (time.monotonic(), document)
        return document


def providers() -> dict[str, Provider]:
    return {name: Provider(name=name, **fields) for name, fields in settings.SWITCHYARD_OIDC_PROVIDERS.items()}


def provider(name: str) -> Provider | None:
    return providers().get(name)


def forget_discovery() -> None:
    """Tests point the same issuer at a new provider process."""
    with _lock:
        _discovered.clear()
