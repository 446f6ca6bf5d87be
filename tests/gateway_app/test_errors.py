"""Every refusal in docs/errors.md: OpenAI's error shape, the right status, code and headers."""
from datetime import timedelta

import openai
import pytest
from django.utils import timezone

from apikeys.scopes import Scope
from quotas.models import QuotaPolicy
from quotas.services import update_quota_policy
from tenants.services import set_tenant_status
from tests.factories import SYSTEM
from tests.gateway_app.conftest import MODEL, client_for, inference_key, wait_for
from tests.gateway_app.helpers import add_deployment, make_model_version

pytestmark = pytest.mark.django_db(transaction=True)
BODY = {"model": MODEL, "prompt": "hi", "max_tokens": 2}


def error_of(response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["x-request-id"]
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "code"}
    return error


@pytest.mark.parametrize("authorization", [None, "Basic abc", "Bearer", "Bearer sy_live_nope"])
def test_missing_or_malformed_key_is_401(served, authorization):
    headers = {"authorization": authorization} if authorization else {}
    response = served.gateway.post("/v1/completions", None, BODY, headers=headers)
    assert error_of(response, 401)["type"] == "authentication_error"


def test_well_formed_but_unknown_key_is_401(served):
    from apikeys.keyformat import generate_key

    with pytest.raises(openai.AuthenticationError) as caught:
        client_for(served.gateway, generate_key()).completions.create(**BODY)
    assert caught.value.code == "invalid_api_key"


def test_expired_key_is_401(served, alice):
    key = inference_key(alice.tenant, expires_at=timezone.now() + timedelta(seconds=1))
    assert served.gateway.post("/v1/completions", key.raw, BODY).status_code == 200
    expired = wait_for(lambda: served.gateway.post("/v1/completions", key.raw, BODY).status_code == 401, timeout=5)
    assert expired
    assert error_of(served.gateway.post("/v1/completions", key.raw, BODY), 401)["code"] == "api_key_expired"


def test_key_without_inference_scope_is_403(served, alice):
    admin_only = inference_key(alice.tenant, scopes=(Scope.ADMIN,))
    assert error_of(served.gateway.post("/v1/completions", admin_only.raw, BODY), 403)["code"] == "scope_missing"


def test_model_outside_the_allow_list_is_403(served):
    policy = QuotaPolicy.objects.get(tenant=served.alice.tenant, api_key=None, user=None)
    update_quota_policy(policy, actor=SYSTEM, allowed_models=["some-other-model"])
    served.gateway.wait_synced()
    response = served.gateway.post("/v1/completions", served.alice.key.raw, BODY)
    assert error_of(response, 403)["code"] == "model_not_allowed"
    assert served.gateway.models(served.alice.key.raw).json()["data"] == []


def test_suspended_tenant_is_403(served):
    set_tenant_status(served.alice.tenant, "suspended", actor=SYSTEM)
    served.gateway.wait_synced()
    response = served.gateway.post("/v1/chat/completions", served.alice.key.raw,
                                   {"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    assert error_of(response, 403)["code"] == "tenant_suspended"


def test_unknown_model_is_404(served):
    with pytest.raises(openai.NotFoundError) as caught:
        served.client.completions.create(model="no-such-model", prompt="x")
    assert caught.value.code == "model_not_found"


def test_another_tenants_dedicated_model_is_unknown(served, bob, fast_sims):
    add_deployment(make_model_version("alice-private"), tenant=served.alice.tenant, name="private",
                   urls=[fast_sims[0].url])
    served.gateway.wait_until_serving(served.alice.key.raw, "alice-private")
    response = served.gateway.post("/v1/completions", bob.key.raw, {**BODY, "model": "alice-private"})
    assert error_of(response, 404)["code"] == "model_not_found"
    assert "alice-private" not in {m["id"] for m in served.gateway.models(bob.key.raw).json()["data"]}


def test_body_over_the_limit_is_413(gateway, alice, shared_pool):
    server = gateway(max_body_bytes=4096)
    big = {**BODY, "prompt": "x" * 5000}
    assert error_of(server.post("/v1/completions", alice.key.raw, big), 413)["code"] == "request_too_large"
    chunks = (b'{"model": "sim-coder", "prompt": "' + b"y" * 1000 for _ in range(6))  # no content-length
    assert server.post("/v1/completions", alice.key.raw, chunks).status_code == 413


@pytest.mark.parametrize("body, code", [
    (b"{not json", "invalid_json"),
    (b"[1, 2]", "invalid_body"),
    (b'{"prompt": "x"}', "missing_model"),
    (b'{"model": "sim-coder", "prompt": "x", "max_tokens": -3}', "invalid_max_tokens"),
])
def test_bad_bodies_are_400(served, body, code):
    response = served.gateway.post("/v1/completions", served.alice.key.raw, body,
                                   headers={"content-type": "application/json"})
    assert error_of(response, 400)["code"] == code


def test_rate_limit_is_429_with_retry_after_and_ratelimit_headers(served):
    policy = QuotaPolicy.objects.get(tenant=served.alice.tenant, api_key=None, user=None)
    update_quota_policy(policy, actor=SYSTEM, requests_per_minute=2, tokens_per_minute=100_000)
    served.gateway.wait_synced()
    ok = served.gateway.post("/v1/completions", served.alice.key.raw, BODY)
    assert ok.status_code == 200 and ok.headers["x-ratelimit-limit-requests"] == "2"
    served.gateway.post("/v1/completions", served.alice.key.raw, BODY)
    refused = served.gateway.post("/v1/completions", served.alice.key.raw, BODY)
    assert error_of(refused, 429)["code"] == "rate_limit_exceeded"
    assert int(refused.headers["retry-after"]) >= 1
    for name in ("limit", "remaining", "reset"):
        assert refused.headers[f"x-ratelimit-{name}-requests"]
        assert refused.headers[f"x-ratelimit-{name}-tokens"]
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"


def test_no_ready_instance_is_503(served):
    add_deployment(make_model_version("cold-model"), tenant=None, name="cold", urls=[])
    served.gateway.wait_synced()
    response = served.gateway.post("/v1/completions", served.alice.key.raw, {**BODY, "model": "cold-model"})
    assert error_of(response, 503)["code"] == "no_capacity"


def test_unknown_route_and_method(served):
    import httpx

    assert httpx.get(served.gateway.url + "/v1/nothing").status_code == 404
    assert httpx.get(served.gateway.url + "/v1/completions").status_code == 405
