"""The tenant's redaction mode at the gateway, and the de-duplication cache.

What reached the engine is read from an `EchoEngine` (a test-only stand-in that keeps the
bodies it received): the simulator does not echo prompts.
"""
from __future__ import annotations

import pytest

from quotas.models import QuotaPolicy
from quotas.services import update_quota_policy
from tenants.models import RedactionMode
from tenants.services import update_tenant
from tests.factories import SYSTEM
from tests.gateway_app.conftest import MODEL, wait_for
from tests.gateway_app.helpers import usage_rows

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key id
PROMPT = f"aws_access_key_id = {AWS_KEY}\ndef upload(bucket):"


def ask(server, key: str, prompt: str = PROMPT, headers: dict | None = None, **fields):
    return server.post("/v1/completions", key, {"model": MODEL, "prompt": prompt, "max_tokens": 4, **fields},
                       headers=headers or {})


def metered(response):
    found = wait_for(lambda: usage_rows(request_id=response.headers["x-request-id"]), 5)
    assert found, "the request was never metered"
    return found[0]


def set_mode(tenant, mode: str) -> None:
    update_tenant(tenant, redaction_mode=mode, actor=SYSTEM)


def test_redact_mode_sends_placeholders_and_counts_them(gateway, alice, echo):
    server = gateway()
    server.wait_until_serving(alice.key.raw, MODEL)
    response = ask(server, alice.key.raw)
    assert response.status_code == 200
    sent = echo.bodies[-1]["prompt"]
    assert AWS_KEY not in sent and "[REDACTED:aws_access_key]" in sent
    row = metered(response)
    assert row.redactions == 1
    # The slow-requests page keeps the prompt's start: redacted, never the secret.
    assert "[REDACTED:aws_access_key]" in row.redacted_prompt and AWS_KEY not in row.redacted_prompt


def test_block_mode_refuses_with_400_and_the_engine_sees_nothing(gateway, alice, echo):
    set_mode(alice.tenant, RedactionMode.BLOCK)
    server = gateway()
    server.wait_until_serving(alice.key.raw, MODEL)
    response = ask(server, alice.key.raw)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "secret_detected" and AWS_KEY not in response.text
    assert echo.bodies == []
    row = metered(response)
    assert row.redactions == 1 and row.outcome == "client_error"


def test_off_mode_sends_the_prompt_unchanged(gateway, alice, echo):
    set_mode(alice.tenant, RedactionMode.OFF)
    server = gateway()
    server.wait_until_serving(alice.key.raw, MODEL)
    assert ask(server, alice.key.raw).status_code == 200
    assert echo.bodies[-1]["prompt"] == PROMPT


def test_a_mode_change_reaches_a_running_gateway(gateway, alice, echo):
    server = gateway()
    server.wait_until_serving(alice.key.raw, MODEL)
    assert ask(server, alice.key.raw).status_code == 200
    set_mode(alice.tenant, RedactionMode.BLOCK)
    server.wait_synced()
    assert ask(server, alice.key.raw).status_code == 400


DETERMINISTIC = {"temperature": 0}


def test_an_identical_deterministic_request_is_answered_from_the_cache(gateway, alice, echo):
    server = gateway()
    server.wait_until_serving(alice.key.raw, MODEL)
    first = ask(server, alice.key.raw, "def f():", **DETERMINISTIC)
    second = ask(server, alice.key.raw, "def f():", **DETERMINISTIC)
    assert first.headers["x-switchyard-cache"] == "miss" and second.headers["x-switchyard-cache"] == "hit"
    assert second.json() == first.json() and len(echo.bodies) == 1
    hit, miss = metered(second), metered(first)
    assert hit.cache_hit and not miss.cache_hit
    # The engine did no work: the prompt counts as cached, nothing was generated.
    assert (hit.prompt_tokens, hit.cached_tokens, hit.completion_tokens) == (7, 7, 0)
    assert hit.model_version_id == miss.model_version_id and hit.outcome == "ok"


def test_the_cache_is_never_shared_across_tenants(gateway, alice, bob, echo):
    server = gateway()
    server.wait_until_serving(alice.key.raw, MODEL)
    assert ask(server, alice.key.raw, "def g():", **DETERMINISTIC).headers["x-switchyard-cache"] == "miss"
    other = ask(server, bob.key.raw, "def g():", **DETERMINISTIC)
    assert other.headers["x-switchyard-cache"] == "miss" and len(echo.bodies) == 2


@pytest.mark.parametrize("fields, headers", [
    ({"temperature": 0}, {"x-switchyard-cache": "no"}),  # opted out
    ({}, {}),  # no temperature: the engine's default samples
    ({"temperature": 0.7}, {}),
    ({"temperature": 0, "n": 2}, {}),
])
def test_requests_that_may_differ_or_opt_out_are_not_cached(gateway, alice, echo, fields, headers):
    server = gateway()
    server.wait_until_serving(alice.key.raw, MODEL)
    for _ in range(2):
        response = ask(server, alice.key.raw, "def h():", headers=headers, **fields)
        assert response.status_code == 200 and "x-switchyard-cache" not in response.headers
    assert len(echo.bodies) == 2


def test_a_cache_hit_still_counts_against_the_request_rate(gateway, alice, echo):
    policy = QuotaPolicy.objects.get(tenant=alice.tenant, api_key=None, user=None)
    update_quota_policy(policy, actor=SYSTEM, requests_per_minute=2, tokens_per_minute=100_000)
    server = gateway()
    server.wait_until_serving(alice.key.raw, MODEL)
    codes = [ask(server, alice.key.raw, "def k():", **DETERMINISTIC).status_code for _ in range(3)]
    assert codes == [200, 200, 429] and len(echo.bodies) == 1
