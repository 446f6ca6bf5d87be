"""Revocation reaches the gateway within a second; every request is metered exactly once."""
import time

import httpx
import pytest

from apikeys.services import revoke_api_key
from tests.factories import SYSTEM
from tests.gateway_app.conftest import MODEL, wait_for
from tests.gateway_app.helpers import add_deployment, make_model_version, usage_rows

pytestmark = pytest.mark.django_db(transaction=True)
BODY = {"model": MODEL, "prompt": "hi", "max_tokens": 2}


def test_a_revoked_key_is_refused_within_one_second(served):
    key = served.alice.key
    assert served.gateway.post("/v1/completions", key.raw, BODY).status_code == 200  # now cached
    revoke_api_key(key.api_key, actor=SYSTEM)
    deadline = time.monotonic() + 1.0 + 0.25  # the promise, plus slack for this test's own requests
    status = 200
    while status == 200 and time.monotonic() < deadline:
        status = served.gateway.post("/v1/completions", key.raw, BODY).status_code
    assert status == 401
    assert served.gateway.post("/v1/completions", key.raw, BODY).json()["error"]["code"] == "api_key_revoked"


def test_refused_requests_are_metered_once_each(served):
    responses = {"unknown-model": served.gateway.post("/v1/completions", served.alice.key.raw,
                                                      {**BODY, "model": "nope"}),
                 "bad-json": served.gateway.post("/v1/completions", served.alice.key.raw, b"{")}
    ids = {name: response.headers["x-request-id"] for name, response in responses.items()}
    rows = wait_for(lambda: (r := usage_rows(request_id__in=ids.values())) and len(r) == 2 and r, timeout=5)
    by_id = {row.request_id: row for row in rows}
    assert (by_id[ids["unknown-model"]].status_code, by_id[ids["unknown-model"]].outcome) == (404, "client_error")
    assert by_id[ids["bad-json"]].status_code == 400
    assert all(row.completion_tokens == 0 for row in rows)


def test_a_client_leaving_mid_stream_is_billed_once_for_what_was_generated(gateway, alice, simulators):
    engine = simulators("--decode-ms-per-token", "5", model="slow-coder")
    add_deployment(make_model_version("slow-coder"), tenant=None, name="slow", urls=[engine.url])
    server = gateway()
    server.wait_until_serving(alice.key.raw, "slow-coder")
    body = {"model": "slow-coder", "prompt": "write a lot", "max_tokens": 2000, "stream": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=30,
                      headers={"authorization": f"Bearer {alice.key.raw}"}) as response:
        rid = response.headers["x-request-id"]
        events = [line for line, _ in zip(response.iter_lines(), range(20))]
    assert any(e.startswith("data: {") for e in events)
    row = wait_for(lambda: (r := usage_rows(request_id=rid)) and r[0], timeout=5)
    assert row.outcome == "cancelled" and row.streamed
    assert 0 < row.completion_tokens < 2000  # what was streamed before the client left


def test_a_client_leaving_a_long_non_streaming_request_cancels_it_at_once(gateway, alice, simulators):
    """The gateway's server calls back on the disconnect: the engine call is closed (vLLM aborts)."""
    engine = simulators("--decode-ms-per-token", "20", model="slow-coder")
    add_deployment(make_model_version("slow-coder"), tenant=None, name="slow", urls=[engine.url])
    server = gateway()
    server.wait_until_serving(alice.key.raw, "slow-coder")
    body = {"model": "slow-coder", "prompt": "write a lot", "max_tokens": 2000}  # ~40 s of generation
    left = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):  # the answer, and so its x-request-id, never comes
        httpx.post(server.url + "/v1/completions", json=body, timeout=0.5,
                   headers={"authorization": f"Bearer {alice.key.raw}"})
    row = wait_for(lambda: (r := usage_rows(model_name="slow-coder")) and r[0], timeout=5)
    assert row.outcome == "cancelled" and row.status_code == 499
    assert row.occurred_at is not None and time.monotonic() - left < 30  # not after the 40 s generation

    def aborted() -> bool:
        for line in httpx.get(engine.url + "/metrics").text.splitlines():
            if line.startswith("vllm:request_success_total") and 'finished_reason="abort"' in line:
                return float(line.rsplit(" ", 1)[1]) >= 1
        return False
    assert wait_for(aborted, timeout=5)


def test_a_client_reusing_its_request_id_is_metered_and_limited_per_request(gateway, alice, simulators):
    """The client's x-request-id is only echoed: metering, leases and reservations use the gateway's own id."""
    from concurrent.futures import ThreadPoolExecutor

    from quotas.models import QuotaPolicy
    from quotas.services import update_quota_policy

    engine = simulators("--decode-ms-per-token", "20", model="slow-coder")
    add_deployment(make_model_version("slow-coder"), tenant=None, name="slow", urls=[engine.url])
    policy = QuotaPolicy.objects.get(tenant=alice.tenant, api_key=None, user=None)
    update_quota_policy(policy, actor=SYSTEM, max_concurrent_requests=1)
    server = gateway()
    server.wait_until_serving(alice.key.raw, "slow-coder")
    body = {"model": "slow-coder", "prompt": "x", "max_tokens": 25}  # ~0.5 s each
    same = {"x-request-id": "retry-of-the-same-call"}
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda _: server.post("/v1/completions", alice.key.raw, body, headers=same), range(2)))
    assert sorted(r.status_code for r in both) == [200, 429]  # one lease each: the second is over the limit
    assert all(r.headers["x-client-request-id"] == "retry-of-the-same-call" for r in both)
    again = server.post("/v1/completions", alice.key.raw, body, headers=same)
    assert again.status_code == 200  # the first request's lease was released, not shared
    ids = {r.headers["x-request-id"] for r in [*both, again]}
    assert len(ids) == 3
    rows = wait_for(lambda: (r := usage_rows(request_id__in=ids)) and len(r) == 3 and r, timeout=5)
    assert sorted(row.status_code for row in rows) == [200, 200, 429]  # every request metered once
