"""/console/sso/<provider>/ starts a sign-in (state, nonce, PKCE), /console/sso/callback/ finishes it."""
import logging

import requests
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import Http404
from django.shortcuts import redirect
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from sso import providers
from sso.backend import SESSION_KEY

log = logging.getLogger(__name__)
MAX_PENDING_STATES = 20  # sign-ins begun in other tabs and never finished; the oldest are dropped


class SignInStart(OIDCAuthenticationRequestView):
    def __init__(self, *args, **kwargs):  # the provider comes from the URL, not from settings
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)

    def get_settings(self, attr, *args):
        return import_from_settings(attr, *args)

    def get(self, request, provider):
        chosen = providers.provider(provider)
        if chosen is None:
            raise Http404("No such identity provider.")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = chosen.discovery()["authorization_endpoint"]
        except (requests.RequestException, ImproperlyConfigured, ValueError, KeyError) as exc:
            log.warning("identity provider %s unreachable or misconfigured: %s", chosen.name, exc)
            return redirect(settings.LOGIN_URL_SSO_FAILED)
        self.OIDC_RP_CLIENT_ID = chosen.client_id
        self.scopes = chosen.scopes
        response = super().get(request)
        state = next(reversed(request.session["oidc_states"]))  # the one just added
        pending = dict(list(request.session.get(SESSION_KEY, {}).items())[-MAX_PENDING_STATES:])
        request.session[SESSION_KEY] = {**pending, state: chosen.name}
        return response

    def get_extra_params(self, request):
        return {"scope": self.scopes}


class SignInCallback(OIDCAuthenticationCallbackView):
    @property
    def failure_url(self):
        return settings.LOGIN_URL_SSO_FAILED
