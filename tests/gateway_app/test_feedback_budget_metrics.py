"""POST /v1/feedback, the over-budget 429, and the prefix-affinity placement metric."""
from __future__ import annotations

from decimal import Decimal

import httpx

from tests.factories import SYSTEM
from tests.gateway_app.conftest import MODEL, wait_for
from tests.gateway_app.helpers import usage_rows
from usage.models import CompletionFeedback

BODY = {"model": MODEL, "prompt": "def add(a, b):", "max_tokens": 2}


def feedback(served, key: str, body, **kwargs) -> httpx.Response:
    return served.gateway.post("/v1/feedback", key, body, **kwargs)


def metered_request(served) -> str:
    """A completion by alice, once its usage row is written; its request id."""
    response = served.gateway.post("/v1/completions", served.alice.key.raw, BODY)
    assert response.status_code == 200
    rid = response.headers["x-request-id"]
    assert wait_for(lambda: usage_rows(request_id=rid), 5)
    return rid


def test_feedback_on_own_request_is_recorded_and_last_answer_wins(served):
    rid = metered_request(served)
    first = feedback(served, served.alice.key.raw, {"request_id": rid, "accepted": True})
    assert first.status_code == 200 and first.json() == {"object": "feedback", "request_id": rid, "accepted": True}
    assert feedback(served, served.alice.key.raw, {"request_id": rid, "accepted": False}).status_code == 200
    row = CompletionFeedback.objects.get(request_id=rid)
    assert row.tenant_id == served.alice.tenant.pk and row.accepted is False


def test_another_tenants_request_id_is_404(served, bob):
    rid = metered_request(served)
    response = feedback(served, bob.key.raw, {"request_id": rid, "accepted": True})
    assert response.status_code == 404 and response.json()["error"]["code"] == "request_not_found"
    assert CompletionFeedback.objects.filter(request_id=rid).count() == 0


def test_bad_feedback_bodies_are_400(served):
    key = served.alice.key.raw
    rid = "0" * 32
    cases = [(b"not json", "invalid_json"), (b"[1]", "invalid_body"),
             ({"accepted": True}, "invalid_request_id"),
             ({"request_id": "x" * 65, "accepted": True}, "invalid_request_id"),
             ({"request_id": "abc", "accepted": True}, "invalid_request_id"),
             ({"request_id": "\x00", "accepted": True}, "invalid_request_id"),  # was a 500 on PostgreSQL
             (b'{"request_id": "\\ud800", "accepted": true}', "invalid_json"),
             ({"request_id": rid, "accepted": "yes"}, "invalid_accepted"), ({"request_id": rid}, "invalid_accepted")]
    for body, code in cases:
        response = feedback(served, key, body)
        assert response.status_code == 400 and response.json()["error"]["code"] == code, (body, response.text)
    assert feedback(served, None, {"request_id": "abc", "accepted": True}).status_code == 401


def test_a_tenant_over_its_money_budget_gets_429_naming_it(served):
    from quotas.models import QuotaPolicy
    from quotas.services import update_quota_policy
    from usage.budgets import over_reason
    from usage.services import set_budget_state

    policy = QuotaPolicy.objects.get(tenant=served.alice.tenant, api_key=None, user=None)
    policy = update_quota_policy(policy, actor=SYSTEM, monthly_budget_usd=Decimal("5"))
    reason = over_reason(policy, 0, Decimal("5.01"))
    set_budget_state(served.alice.tenant, over_budget=True, reason=reason, tokens=0, cost_usd=Decimal("5.01"),
                     actor=SYSTEM)
    served.gateway.wait_synced()
    refused = served.gateway.post("/v1/completions", served.alice.key.raw, BODY)
    error = refused.json()["error"]
    assert refused.status_code == 429 and error["code"] == "budget_exceeded"
    assert "monthly_budget_usd" in error["message"] and "$5.00" in error["message"]
    assert int(refused.headers["retry-after"]) >= 1
    set_budget_state(served.alice.tenant, over_budget=False, reason="", tokens=0, cost_usd=Decimal("0"), actor=SYSTEM)
    served.gateway.wait_synced()
    assert served.gateway.post("/v1/completions", served.alice.key.raw, BODY).status_code == 200


def test_a_tenant_over_its_token_budget_is_told_which_budget(served):
    from usage.services import set_budget_state

    set_budget_state(served.alice.tenant, over_budget=True, reason="monthly token budget of 1,000 tokens used up",
                     tokens=1200, cost_usd=Decimal("0"), actor=SYSTEM)
    served.gateway.wait_synced()
    refused = served.gateway.post("/v1/completions", served.alice.key.raw, BODY)
    assert refused.status_code == 429 and "monthly_token_budget" in refused.json()["error"]["message"]


def test_prefix_affinity_placements_are_counted(served):
    for _ in range(3):
        response = served.gateway.post("/v1/completions", served.alice.key.raw, BODY,
                                       headers={"x-switchyard-affinity": "repo:src/app.py"})
        assert response.status_code == 200
    text = served.gateway.metrics()
    home = [line for line in text.splitlines() if line.startswith("switchyard_gateway_prefix_affinity_home_total")]
    assert home and float(home[0].split()[-1]) == 3.0  # one at a time: always within the load bound
    assert "switchyard_gateway_prefix_affinity_spill_total 0.0" in text
