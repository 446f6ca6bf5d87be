"""A monthly token budget holds for every request shape (docs/limits.md, "What a budget can overspend").

Property: over random request shapes — n, best_of, max_tokens present or absent, prompt batches,
unicode-heavy prompts (emoji, CJK, combining marks), chats of many messages, streams and not,
sent at once — what the usage records bill a key never exceeds its budget by more than the
documented bound, and Redis counts exactly what was billed. The real gateway serves them in-process
from simulator engines, whose tokenizer costs a token per UTF-8 byte of non-ASCII text (the worst
a byte-level BPE can do) and which report usage for several choices as vLLM does.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from quotas.services import create_quota_policy
from tests.factories import SYSTEM
from tests.gateway_app.conftest import inference_key, wait_for
from tests.gateway_app.helpers import add_deployment, limits_prefix, make_model_version, usage_rows

pytestmark = pytest.mark.django_db(transaction=True)
MODEL = "budget-coder"
# The documented bound (docs/limits.md) for engines that honour max_tokens and report usage, with
# Redis up and no request outliving its reservation: nothing can be spent beyond the budget.
OVERSPEND_BOUND = 0

TEXT = st.text(st.sampled_from("abc xyz_()=:\n😀🚀👍🏽中文字符e\u0301a\u0308\u20dd\u200b"), max_size=60)


def completions_body():
    prompt = st.one_of(TEXT.filter(bool), st.lists(TEXT.filter(bool), min_size=1, max_size=4),
                       st.lists(st.integers(0, 3000), min_size=1, max_size=50))
    return st.fixed_dictionaries({"prompt": prompt}, optional={
        "n": st.integers(1, 6), "best_of": st.integers(1, 8), "max_tokens": st.integers(1, 48),
        "suffix": TEXT}).filter(lambda b: b.get("best_of", 99) >= b.get("n", 1)).filter(_renderable)


def _renderable(body: dict) -> bool:
    """A suffix needs text prompts (token ids cannot be rendered into a FIM template: a 400)."""
    prompt = body["prompt"]
    return "suffix" not in body or isinstance(prompt, str) or all(isinstance(p, str) for p in prompt)


def chat_body():
    message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]), "content": TEXT})
    return st.fixed_dictionaries({"messages": st.lists(message, min_size=1, max_size=25)}, optional={
        "n": st.integers(1, 6), "max_tokens": st.integers(1, 48), "max_completion_tokens": st.integers(1, 48)})


REQUEST = st.tuples(st.sampled_from(["completions", "chat"]), st.booleans(), st.data())


@pytest.fixture
def budget_pool(audit_head, simulators):
    """Two zero-latency engines with room for long unicode prompts and many choices."""
    engines = [simulators("--decode-ms-per-token", "0", "--prefill-ms-per-token", "0", "--max-model-len", "32768",
                          "--num-gpu-blocks", "8192", "--max-num-seqs", "64", model=MODEL) for _ in range(2)]
    return add_deployment(make_model_version(MODEL, family="starcoder2"), tenant=None, name="budget-sims",
                          urls=[e.url for e in engines])  # a coder family: `suffix` renders a FIM prompt


@pytest.fixture
def budget_gateway(gateway, budget_pool, tenant_a):
    server = gateway()
    probe = inference_key(tenant_a)
    server.wait_until_serving(probe.raw, MODEL)
    return server


def send(server, raw_key: str, kind: str, stream: bool, body: dict) -> str:
    """One request, read to its end; its gateway request id."""
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    with httpx.stream("POST", server.url + path, json={"model": MODEL, **body, "stream": stream}, timeout=60,
                      headers={"authorization": f"Bearer {raw_key}"}) as response:
        response.read()
        assert response.status_code in (200, 429), response.text
        return response.headers["x-request-id"]


def billed(ids: list[str]) -> int:
    rows = wait_for(lambda: (r := usage_rows(request_id__in=ids)) and len(r) == len(ids) and r, timeout=10)
    assert rows, "every request leaves one usage record"
    return sum(row.prompt_tokens + row.completion_tokens for row in rows)


def redis_used(server, key_id: int) -> int:
    client = redis.Redis.from_url(server.app.config.redis_url)
    try:
        found = [k for k in client.scan_iter(f"{limits_prefix(server)}:*:key:{key_id}:monthly_tokens:*")
                 if not k.endswith(b":r")]
        return sum(int(client.hget(k, "used") or 0) for k in found)
    finally:
        client.close()


@settings(max_examples=18, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(budget=st.integers(100, 4000), requests=st.lists(REQUEST, min_size=2, max_size=10))
def test_a_key_budget_holds_for_every_request_shape(budget_gateway, tenant_a, budget, requests):
    key = inference_key(tenant_a)
    create_quota_policy(tenant=tenant_a, api_key=key.api_key, actor=SYSTEM, monthly_token_budget=budget)
    budget_gateway.wait_synced()
    shapes = [(kind, stream, data.draw(chat_body() if kind == "chat" else completions_body()))
              for kind, stream, data in requests]
    ids = []
    for wave in (shapes[::2], shapes[1::2]):  # each at once: reservations must hold under concurrency
        with ThreadPoolExecutor(len(wave)) as pool:
            ids += pool.map(lambda shape: send(budget_gateway, key.raw, *shape), wave)
    spent = billed(ids)
    note(f"budget {budget}, billed {spent}")
    assert spent <= budget + OVERSPEND_BOUND
    assert wait_for(lambda: redis_used(budget_gateway, key.api_key.pk) == spent, timeout=5), \
        (redis_used(budget_gateway, key.api_key.pk), spent)


@pytest.mark.parametrize("fields, code", [({"n": 0}, "invalid_n"), ({"n": 2, "best_of": 1}, "invalid_best_of"),
                                          ({"prompt": ["p"] * 1025}, "invalid_prompt")])
def test_bad_multipliers_are_400s_before_any_limit_counts(budget_gateway, tenant_a, fields, code):
    key = inference_key(tenant_a)
    create_quota_policy(tenant=tenant_a, api_key=key.api_key, actor=SYSTEM, requests_per_minute=1)
    budget_gateway.wait_synced()
    body = {"model": MODEL, "prompt": "x", "max_tokens": 2, **fields}
    for _ in range(2):
        refused = budget_gateway.post("/v1/completions", key.raw, body)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == code
    assert budget_gateway.post("/v1/completions", key.raw, {"model": MODEL, "prompt": "x"}).status_code == 200
