"""The provider's claims: e-mail, name and a `groups` claim (the user's Django groups) — and, when the
test asks through IDP_MODE_FILE, an ID token that a relying party must refuse."""
import json
import time

from django.conf import settings
from jwcrypto import jwk, jwt
from oauth2_provider.oauth2_validators import OAuth2Validator


def _mode() -> str:
    path = settings.STATE_DIR / "mode"
    return path.read_text().strip() if path.exists() else ""


class GroupsValidator(OAuth2Validator):
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "openid", "email": "openid",
                        "preferred_username": "openid"}

    def get_additional_claims(self, request):
        user = request.user
        return {"email": user.email, "preferred_username": user.username,
                "groups": sorted(user.groups.values_list("name", flat=True))}

    def finalize_id_token(self, id_token, token, token_handler, request):
        serialized = super().finalize_id_token(id_token, token, token_handler, request)
        mode = _mode()
        if not mode:
            return serialized
        return _misbehave(mode, serialized, request.client.jwk_key)


def _misbehave(mode: str, serialized: str, key) -> str:
    """Re-issue the token wrongly: claims changed but properly signed, or signed by a stranger's key."""
    original = jwt.JWT(jwt=serialized, key=key)
    header, claims = json.loads(original.header), json.loads(original.claims)
    if mode == "wrong-audience":
        claims["aud"] = "some-other-client"
    elif mode == "expired":
        claims["iat"], claims["exp"] = int(time.time()) - 3600, int(time.time()) - 1800
    elif mode == "forged":
        key = jwk.JWK.generate(kty="RSA", size=2048)  # same kid in the header, another key
    token = jwt.JWT(header=json.dumps(header), claims=json.dumps(claims))
    token.make_signed_token(key)
    return token.serialize()
