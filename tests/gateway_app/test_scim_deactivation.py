"""A user deactivated through SCIM loses the gateway at once: their personal keys are revoked and the
revocation reaches every gateway over the change bus, like any other (no timing is asserted here)."""
import json
import time

import pytest
from django.test import Client

from sso.providers import Provider
from sso.services import scim_create_user
from tests.factories import SYSTEM, make_member
from tests.gateway_app.conftest import MODEL, inference_key, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
TOKEN = "scim-token-for-the-gateway-test-0123"
BODY = {"model": MODEL, "prompt": "hi", "max_tokens": 2}


def test_a_scim_deactivated_users_key_is_refused_by_the_gateway(served, settings):
    settings.SWITCHYARD_OIDC_PROVIDERS = {"okta": {"label": "Okta", "issuer": "https://okta.example/o",
                                                   "client_id": "c", "client_secret": "s", "scim_token": TOKEN}}
    provider = Provider(name="okta", label="Okta", issuer="https://okta.example/o", client_id="c", client_secret="s")
    user = scim_create_user(provider=provider, user_name="carol", email="carol@idp.example", actor=SYSTEM)
    key = inference_key(served.alice.tenant, user=make_member(served.alice.tenant, "developer", user),
                        role="developer", name="carol's laptop")
    assert served.gateway.post("/v1/completions", key.raw, BODY).status_code == 200
    patch = {"schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
             "Operations": [{"op": "replace", "path": "active", "value": False}]}
    response = Client(HTTP_AUTHORIZATION=f"Bearer {TOKEN}").patch(
        f"/scim/v2/Users/{user.pk}", json.dumps(patch), content_type="application/scim+json")
    answered = time.monotonic()
    assert response.status_code == 200 and response.json()["active"] is False
    refused = wait_for(lambda: (r := served.gateway.post("/v1/completions", key.raw, BODY)).status_code == 401 and r,
                       timeout=30)
    print(f"SCIM 200 → the gateway's first 401 for the user's key: {time.monotonic() - answered:.3f} s")
    assert refused and refused.json()["error"]["code"] == "api_key_revoked"
    assert served.gateway.post("/v1/completions", served.alice.key.raw, BODY).status_code == 200  # others unaffected
