"""mozilla-django-oidc's authorization-code backend, for several providers and with strict ID-token checks.

The library verifies the signature (against the provider's JWKS), the nonce and the expiry; it does not
check the audience or the issuer (`verify_aud: False` upstream), so `_verify_jws` does it all here. Any
refusal is audited (`auth.sso_rejected`, never with the token) and ends as a failed sign-in.
"""
import logging

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from audit.actor import Actor
from audit.services import record_event
from sso import providers
from sso.logout import SESSION_PROVIDER
from sso.services import sign_in_with_oidc

log = logging.getLogger(__name__)
SESSION_KEY = "switchyard_oidc_provider_by_state"
SIGNING_ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "ES512"]


class SwitchyardOIDCBackend(OIDCAuthenticationBackend):
    def __init__(self, *args, **kwargs):  # the provider is known only per request (authenticate)
        self.UserModel = get_user_model()
        self.provider = None

    def get_settings(self, attr, *args):
        return import_from_settings(attr, *args)

    def authenticate(self, request, **kwargs):
        if request is None or "code" not in request.GET or "state" not in request.GET:
            return None
        name = request.session.get(SESSION_KEY, {}).get(request.GET["state"])
        self.provider = providers.provider(name) if name else None
        if self.provider is None:
            return None
        self._configure(self.provider)
        try:
            user = super().authenticate(request, **kwargs)
        except (SuspiciousOperation, jwt.InvalidTokenError, requests.RequestException, ValueError, KeyError) as exc:
            _audit_rejection(self.provider, str(exc))
            return None
        if user is not None:
            request.session[SESSION_PROVIDER] = self.provider.name  # for the provider's logout
        return user

    def _configure(self, provider):
        document = provider.discovery()
        self.OIDC_OP_TOKEN_ENDPOINT = document["token_endpoint"]
        self.OIDC_OP_USER_ENDPOINT = document.get("userinfo_endpoint")
        self.OIDC_OP_JWKS_ENDPOINT = document["jwks_uri"]
        self.OIDC_RP_CLIENT_ID, self.OIDC_RP_CLIENT_SECRET = provider.client_id, provider.client_secret
        self.OIDC_RP_SIGN_ALGO = None  # taken from the token's header, within SIGNING_ALGORITHMS
        self.OIDC_RP_IDP_SIGN_KEY = None

    def verify_token(self, token, **kwargs):
        header = jwt.get_unverified_header(token)
        if header.get("alg") not in SIGNING_ALGORITHMS:  # never "none", never an HMAC keyed by the secret
            raise SuspiciousOperation(f"ID token signed with {header.get('alg')!r}")
        self.OIDC_RP_SIGN_ALGO = header["alg"]
        return super().verify_token(token, **kwargs)

    def _verify_jws(self, payload, key):
        """Signature, audience, issuer, expiry and the claims a sign-in needs — all or nothing."""
        return jwt.decode(payload, key, algorithms=[self.OIDC_RP_SIGN_ALGO], audience=self.provider.client_id,
                          issuer=self.provider.issuer, leeway=settings.SWITCHYARD_OIDC_LEEWAY_SECONDS,
                          options={"require": ["iss", "sub", "aud", "exp", "iat"]})

    def get_or_create_user(self, access_token, id_token, payload):
        """The verified ID token's claims decide; the userinfo endpoint only fills in missing ones."""
        claims = dict(payload)
        if self.provider.groups_claim not in claims or "email" not in claims:
            info = self.get_userinfo(access_token, id_token, payload) if self.OIDC_OP_USER_ENDPOINT else {}
            if info.get("sub") == claims["sub"]:
                claims = {**info, **claims}
        return sign_in_with_oidc(provider=self.provider, claims=claims)


def _audit_rejection(provider, reason: str) -> None:
    log.warning("OIDC sign-in through %s refused: %s", provider.name, reason)
    record_event(actor=Actor.anonymous(f"sso:{provider.name}"), action="auth.sso_rejected",
                 after={"provider": provider.name, "issuer": provider.issuer, "reason": reason[:200]})
