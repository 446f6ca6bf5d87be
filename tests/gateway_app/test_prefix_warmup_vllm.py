"""The prefix warm-up's request fills a real CPU vLLM's prefix cache for the tenant's next request: the session's
engine (tests/conftest.py `tiny_vllm`) gets the warm-up body the gateway would send a joining engine
(`gateway.routing.prefix_warmup.warm_body`, with the tenant's cache salt as `upstream_body` adds it), then a
request of the same repository with another ending; vLLM's own `vllm:prefix_cache_hits_total` counts the head as
hit. With another tenant's salt the same warm-up leaves nothing to hit (vLLM salts the first block's hash)."""
from __future__ import annotations

import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.pipeline.payload import upstream_body
from gateway.routing.prefix_warmup import warm_body
from tests.processes import ENGINE_PYTHON

MODEL = "tiny-coder"
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason=".venv-engine is absent (build it with `make engine`)"),
]


def cache_hits(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=30).text
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples if sample.name == "vllm:prefix_cache_hits_total")


def head() -> str:
    """A repository's head of a few hundred tokens, unique to this run (nothing of it is cached yet)."""
    tag = uuid.uuid4().hex
    return f"# repository acme/{tag}\n" + "".join(f"from pkg_{tag[:6]}.mod_{n} import name_{n}\n" for n in range(40))


def complete(url: str, body: bytes) -> dict:
    answer = httpx.post(url + "/v1/completions", content=body, headers={"content-type": "application/json"},
                        timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def warm_then_ask(url: str, warm_salt: str, ask_salt: str) -> tuple[float, int]:
    """(prefix-cache hits of the asking request, its prompt tokens)."""
    text = head()
    warm = warm_body({"model": MODEL, "prompt": text + "def first(items):\n    return"}, "completion", MODEL)
    assert warm is not None
    complete(url, upstream_body(warm, salt=warm_salt, priority=None))
    before = cache_hits(url)
    asked = complete(url, upstream_body({"model": MODEL, "prompt": text + "def second(rows):\n    return",
                                         "max_tokens": 2}, salt=ask_salt, priority=None))
    return cache_hits(url) - before, asked["usage"]["prompt_tokens"]


def test_the_warm_up_request_fills_vllms_cache_for_the_same_tenant(tiny_vllm_url):
    hits, prompt_tokens = warm_then_ask(tiny_vllm_url, "tenant-a-salt", "tenant-a-salt")
    print(f"same tenant: {hits:.0f} of {prompt_tokens} prompt tokens hit the warmed cache")
    assert prompt_tokens > 200
    # All but the last, partly different block of the prompt (vLLM's CPU block is 16 or 128 tokens).
    assert hits >= prompt_tokens - 128, (hits, prompt_tokens)


def test_another_tenants_salt_finds_nothing_of_it(tiny_vllm_url):
    hits, prompt_tokens = warm_then_ask(tiny_vllm_url, "tenant-a-salt", "tenant-b-salt")
    print(f"another tenant: {hits:.0f} of {prompt_tokens} prompt tokens hit")
    assert prompt_tokens > 200 and hits == 0, (hits, prompt_tokens)
