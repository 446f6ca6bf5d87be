"""RP-initiated logout: after an SSO sign-in, signing out of the console signs out of the provider too."""
from urllib.parse import urlencode

from django.conf import settings
from django.urls import reverse

from sso import providers

SESSION_PROVIDER = "switchyard_oidc_provider"


def sso_logout_url(request) -> str | None:
    """The provider's end_session_endpoint for this session's ID token, or None (local sign-in, no endpoint)."""
    provider = providers.provider(request.session.get(SESSION_PROVIDER) or "")
    id_token = request.session.get("oidc_id_token")
    if provider is None or not id_token:
        return None
    endpoint = provider.discovery().get("end_session_endpoint")
    if not endpoint:
        return None
    back = settings.SWITCHYARD_CONSOLE_URL + reverse("console:login")
    return f"{endpoint}?{urlencode({'id_token_hint': id_token, 'post_logout_redirect_uri': back})}"
