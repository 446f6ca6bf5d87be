"""Budgets against a real CPU vLLM serving tiny-coder (the session's engine, tests/conftest.py
`tiny_vllm_url`): several choices and a batch of prompts are reserved and billed as vLLM reports
them, and a budgeted stream is counted from vLLM's own running usage (its chunk format)."""
import httpx
import pytest

from quotas.services import create_quota_policy
from tests.factories import SYSTEM
from tests.gateway_app.conftest import inference_key, wait_for
from tests.gateway_app.helpers import add_deployment, make_model_version, usage_rows
from tests.gateway_app.test_real_vllm import MODEL, pytestmark  # noqa: F401 (the same engine, the same marks)


@pytest.fixture
def budgeted(gateway, tenant_a, tiny_vllm_url):
    """A gateway in front of the session's vLLM, and a key with a (roomy) monthly token budget."""
    key = inference_key(tenant_a)
    create_quota_policy(tenant=tenant_a, api_key=key.api_key, actor=SYSTEM, monthly_token_budget=1_000_000)
    add_deployment(make_model_version(MODEL), tenant=None, name="tiny-budgeted", urls=[tiny_vllm_url],
                   runtime_backend="local")
    server = gateway()
    server.wait_until_serving(key.raw, MODEL)
    return server, key


def post(server, key, path: str, body: dict) -> httpx.Response:
    return server.post(path, key.raw, {"model": MODEL, **body}, timeout=120)


def test_choices_and_prompt_batches_are_billed_as_vllm_reports_them(budgeted):
    server, key = budgeted
    answer = post(server, key, "/v1/completions", {"prompt": ["def add(a, b):", "class Point:"], "n": 3,
                                                   "max_tokens": 4, "ignore_eos": True})
    assert answer.status_code == 200 and len(answer.json()["choices"]) == 6
    assert answer.json()["usage"]["completion_tokens"] == 24  # 2 prompts x 3 choices x 4
    (row,) = wait_for(lambda: usage_rows(request_id=answer.headers["x-request-id"]), timeout=5)
    assert row.completion_tokens == 24 and row.prompt_tokens == answer.json()["usage"]["prompt_tokens"]


def test_a_budgeted_stream_of_several_choices_is_counted_from_vllms_running_usage(budgeted):
    server, key = budgeted
    body = {"model": MODEL, "messages": [{"role": "user", "content": "write a loop 😀 中文"}], "n": 2, "max_tokens": 6,
            "ignore_eos": True, "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=120,
                      headers={"authorization": f"Bearer {key.raw}"}) as response:
        text = response.read().decode()
    assert response.status_code == 200 and text.endswith("data: [DONE]\n\n") and "budget_exceeded" not in text
    assert '"usage"' not in text  # vLLM's running usage, which the gateway asked for, is not passed on
    (row,) = wait_for(lambda: usage_rows(request_id=response.headers["x-request-id"]), timeout=5)
    assert row.completion_tokens == 12 and row.outcome == "ok"
