"""End-to-end tests against ``python -m simulator`` subprocesses."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest
from sim_helpers import MODEL, cached_tokens, complete, long_text, sample_value, scrape


def test_health_and_models(basic_server):
    health = httpx.get(basic_server + "/health")
    assert health.status_code == 200 and health.content == b""
    models = httpx.get(basic_server + "/v1/models").json()
    assert models["object"] == "list"
    card = models["data"][0]
    assert card["id"] == card["root"] == MODEL
    assert card["object"] == "model" and card["owned_by"] == "vllm"
    assert isinstance(card["max_model_len"], int) and isinstance(card["created"], int)


def test_metrics_names_and_types(basic_server):
    complete(basic_server, "warm up the counters", max_tokens=2)
    families = scrape(basic_server)
    expected = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prefix_cache_queries": "counter",
        "vllm:prefix_cache_hits": "counter",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:request_success": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
    }
    for name, kind in expected.items():
        assert families[name].type == kind, name
        assert all(s.labels["model_name"] == MODEL for s in families[name].samples)
    assert sample_value(families, "vllm:request_success", "vllm:request_success_total",
                        finished_reason="length") >= 1
    assert sample_value(families, "vllm:generation_tokens", "vllm:generation_tokens_total") >= 2
    assert 0.0 <= sample_value(families, "vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc") <= 1.0


def test_prefix_cache_hit_then_miss_after_eviction(start_simulator):
    # 40 blocks * 16 tokens = 640 token slots; each 400-char prompt is 100 tokens.
    base = start_simulator("--num-gpu-blocks", "40", "--prefill-ms-per-token", "0",
                           "--decode-ms-per-token", "0")
    prompt = long_text("The quick brown fox jumps over the lazy dog. ", 400)
    assert cached_tokens(complete(base, prompt)) == 0
    again = cached_tokens(complete(base, prompt))
    assert again == 96  # 6 full 16-token blocks; cached in whole blocks
    fams = scrape(base)
    hits = sample_value(fams, "vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total")
    queries = sample_value(fams, "vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total")
    assert hits == 96 and queries == 200
    for i in range(12):  # 12 * 7 blocks > 40 blocks: LRU evicts the first prompt
        complete(base, long_text(f"filler {i} lorem ipsum dolor sit amet ", 400))
    assert cached_tokens(complete(base, prompt)) == 0
    fams = scrape(base)
    assert sample_value(fams, "vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total") == hits


def test_cache_salt_isolation(basic_server):
    prompt = long_text("Shared system prompt for every tenant in the fleet. ", 300)
    complete(basic_server, prompt)
    assert cached_tokens(complete(basic_server, prompt)) > 0
    assert cached_tokens(complete(basic_server, prompt, cache_salt="tenant-a")) == 0
    assert cached_tokens(complete(basic_server, prompt, cache_salt="tenant-a")) > 0
    assert cached_tokens(complete(basic_server, prompt, cache_salt="tenant-b")) == 0


def test_queueing_when_concurrency_exceeds_max_num_seqs(start_simulator):
    base = start_simulator("--max-num-seqs", "2", "--decode-ms-per-token", "15")
    results: list[dict] = []
    threads = [threading.Thread(target=lambda i=i: results.append(complete(base, f"q{i}", 25)))
               for i in range(6)]
    for t in threads:
        t.start()
    waiting, running = [0.0], [0.0]
    while any(t.is_alive() for t in threads):
        fams = scrape(base)
        waiting.append(sample_value(fams, "vllm:num_requests_waiting", "vllm:num_requests_waiting"))
        running.append(sample_value(fams, "vllm:num_requests_running", "vllm:num_requests_running"))
    for t in threads:
        t.join()
    assert len(results) == 6
    assert max(waiting) > 0 and max(running) <= 2
    fams = scrape(base)
    queue_sum = sample_value(fams, "vllm:request_queue_time_seconds", "vllm:request_queue_time_seconds_sum")
    assert queue_sum > 0


def test_openai_client_completions_and_chat(basic_server):
    client = openai.OpenAI(base_url=basic_server + "/v1", api_key="x")
    comp = client.completions.create(model=MODEL, prompt="Say hi", max_tokens=5)
    assert comp.id.startswith("cmpl-") and comp.object == "text_completion"
    assert comp.choices[0].finish_reason == "length"
    assert comp.usage.completion_tokens == 5 and comp.usage.prompt_tokens == 2
    chat = client.chat.completions.create(model=MODEL, max_tokens=3,
                                          messages=[{"role": "user", "content": "hello"}])
    assert chat.id.startswith("chatcmpl-") and chat.object == "chat.completion"
    assert chat.choices[0].message.role == "assistant" and chat.choices[0].message.content
    assert chat.usage.total_tokens == chat.usage.prompt_tokens + 3


def test_openai_client_streaming_with_usage(basic_server):
    client = openai.OpenAI(base_url=basic_server + "/v1", api_key="x")
    chunks = list(client.completions.create(model=MODEL, prompt="Stream me", max_tokens=4, stream=True,
                                            stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert len(texts) == 4 and chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 4
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"

    stream = client.chat.completions.create(model=MODEL, max_tokens=3, stream=True,
                                            messages=[{"role": "user", "content": "hi"}],
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(content) == 12  # 3 tokens of 4 characters
    assert chunks[-1].usage.completion_tokens == 3


@pytest.mark.parametrize("body,status", [
    ({"model": "nope", "prompt": "x"}, 404),
    ({"model": MODEL}, 400),
    ({"model": MODEL, "prompt": "x", "max_tokens": 0}, 400),
    ({"model": MODEL, "prompt": "x", "priority": 3}, 400),  # fcfs server, like vLLM
])
def test_error_responses(basic_server, body, status):
    resp = httpx.post(basic_server + "/v1/completions", json=body)
    assert resp.status_code == status
    err = resp.json()["error"]
    assert err["code"] == status and err["message"] and err["type"]


def test_invalid_json_and_unknown_route(basic_server):
    resp = httpx.post(basic_server + "/v1/chat/completions", content=b"{not json",
                      headers={"content-type": "application/json"})
    assert resp.status_code == 400 and resp.json()["error"]["type"] == "BadRequestError"
    assert httpx.get(basic_server + "/nope").status_code == 404
    assert httpx.get(basic_server + "/v1/completions").status_code == 405
    client = openai.OpenAI(base_url=basic_server + "/v1", api_key="x")
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="other", prompt="x")


def wait_for(base: str, gauge: str, value: float) -> None:
    """Poll a gauge until it reaches ``value`` (behavioural sync, no sleeps as asserts)."""
    for _ in range(500):
        if sample_value(scrape(base), gauge, gauge) >= value:
            return
        time.sleep(0.01)
    raise AssertionError(f"{gauge} never reached {value}")


class HeldStream(threading.Thread):
    """A streaming request held open until released; flags its first data chunk."""

    def __init__(self, base: str, name: str, priority: int) -> None:
        super().__init__(daemon=True)
        self.base, self.name, self.priority = base, name, priority
        self.started, self.release = threading.Event(), threading.Event()
        self.start()

    def run(self) -> None:
        body = {"model": MODEL, "prompt": self.name, "max_tokens": 3000, "stream": True,
                "priority": self.priority}
        with httpx.stream("POST", self.base + "/v1/completions", json=body, timeout=60) as resp:
            lines = resp.iter_lines()  # keep a reference: dropping it closes the stream
            for line in lines:
                if line.startswith("data: "):
                    self.started.set()  # only a *running* request emits data
                    break
            self.release.wait(60)  # leaving the block closes the connection -> abort

    def finish(self) -> None:
        """Close the stream and wait for the thread."""
        self.release.set()
        self.join(10)


def first_started(streams: list) -> HeldStream:
    """Block until one of the streams emits data; return it."""
    for _ in range(3000):
        started = [s for s in streams if s.started.is_set()]
        if started:
            return started[0]
        time.sleep(0.01)
    raise AssertionError("no stream started")


def test_priority_scheduling_overtakes_queue(start_simulator):
    # max_num_seqs=1: exactly one request can be emitting tokens at a time, so
    # "which stream got data first" is the admission order, independent of timing.
    base = start_simulator("--scheduling-policy", "priority", "--max-num-seqs", "1",
                           "--decode-ms-per-token", "5")
    blocker = HeldStream(base, "blocker", 0)
    assert first_started([blocker]) is blocker
    queued = []
    for name, priority in (("early1", 10), ("early2", 10), ("urgent", 1)):
        queued.append(HeldStream(base, name, priority))
        wait_for(base, "vllm:num_requests_waiting", len(queued))
    order = []
    current = blocker
    while queued:
        current.finish()
        current = first_started(queued)
        assert sum(s.started.is_set() for s in queued) == 1
        queued.remove(current)
        order.append(current.name)
    current.finish()
    assert order == ["urgent", "early1", "early2"]


def test_client_disconnect_aborts_stream(start_simulator):
    base = start_simulator("--decode-ms-per-token", "10")
    body = {"model": MODEL, "prompt": "long stream", "max_tokens": 1000, "stream": True}
    with httpx.stream("POST", base + "/v1/completions", json=body) as resp:
        lines = resp.iter_lines()
        assert next(lines).startswith("data: ")
    for _ in range(500):
        fams = scrape(base)
        if sample_value(fams, "vllm:request_success", "vllm:request_success_total",
                        finished_reason="abort") == 1:
            break
        time.sleep(0.01)
    assert sample_value(fams, "vllm:request_success", "vllm:request_success_total",
                        finished_reason="abort") == 1
    assert sample_value(fams, "vllm:num_requests_running", "vllm:num_requests_running") == 0
    assert sample_value(fams, "vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc") == 0
