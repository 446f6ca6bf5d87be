"""The official openai client through the gateway: completions, chat, streams with usage, models."""
import pytest

from tests.gateway_app.conftest import MODEL, wait_for
from tests.gateway_app.helpers import usage_rows

pytestmark = pytest.mark.django_db(transaction=True)


def test_completion_returns_text_and_usage(served):
    result = served.client.completions.create(model=MODEL, prompt="def fib(n):", max_tokens=5)
    assert result.choices[0].text
    assert result.usage.completion_tokens == 5 and result.usage.prompt_tokens > 0


def test_chat_completion_returns_a_message(served):
    result = served.client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "write a haiku about tests"}], max_tokens=4)
    assert result.choices[0].message.role == "assistant"
    assert result.choices[0].message.content
    assert result.usage.completion_tokens == 4


def test_stream_with_usage_ends_with_the_usage_chunk(served):
    stream = served.client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "count to three"}], max_tokens=6, stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6


def test_stream_without_usage_option_gets_no_usage_chunk_but_is_metered(served):
    stream = served.client.completions.create(model=MODEL, prompt="x = ", max_tokens=7, stream=True)
    chunks = list(stream)
    assert chunks and all(c.choices for c in chunks)  # the usage chunk we asked the engine for is not shown
    rows = wait_for(lambda: usage_rows(streamed=True), timeout=5)
    assert rows and rows[0].completion_tokens == 7 and rows[0].outcome == "ok"


def test_every_response_carries_a_request_id(served):
    raw = served.client.completions.with_raw_response.create(model=MODEL, prompt="a", max_tokens=1)
    assert raw.headers["x-request-id"]
    body = {"model": MODEL, "prompt": "a", "max_tokens": 1}
    mine = served.gateway.post("/v1/completions", served.alice.key.raw, body, headers={"x-request-id": "trace-123"})
    assert mine.headers["x-client-request-id"] == "trace-123"  # the caller's own id, echoed
    assert mine.headers["x-request-id"] not in ("trace-123", raw.headers["x-request-id"])  # the gateway's, unique
    unsafe = served.gateway.post("/v1/completions", served.alice.key.raw, body, headers={"x-request-id": "a b\tc"})
    assert unsafe.status_code == 200 and "x-client-request-id" not in unsafe.headers


def test_models_lists_what_the_key_may_use(served):
    listed = [m.id for m in served.client.models.list()]
    assert listed == [MODEL]


def test_each_request_is_metered_once_with_its_engine_and_version(served):
    raw = served.client.completions.with_raw_response.create(model=MODEL, prompt="hello", max_tokens=3)
    rid = raw.headers["x-request-id"]
    rows = wait_for(lambda: usage_rows(request_id=rid), timeout=5)
    assert len(rows) == 1
    row = rows[0]
    assert (row.tenant_id, row.api_key_prefix, row.user_id) == (
        served.alice.tenant.pk, served.alice.key.api_key.prefix, served.alice.user.pk)
    assert row.model_version_id == served.pool.model_version_id and row.instance_id is not None
    assert (row.completion_tokens, row.status_code, row.outcome, row.endpoint) == (3, 200, "ok", "completions")
    assert row.prompt_tokens > 0 and row.ttft_ms is not None and row.latency_ms >= row.ttft_ms
