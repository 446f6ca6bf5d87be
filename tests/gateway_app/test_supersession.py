"""Superseded editor completions (docs/supersession.md): the real gateway in front of a simulator that
models decode time; a session's newer interactive request cancels its older one upstream."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from bench._typing import FILE, INTERACTIVE, SESSION, Typist, metric, running_sampler
from tests.factories import SYSTEM
from tests.gateway_app.conftest import MODEL, inference_key, wait_for
from tests.gateway_app.helpers import add_deployment, make_model_version, usage_rows

DECODE_MS = "30"  # 64 tokens: about 2 s a request, far longer than a keystroke's 50 ms


@pytest.fixture(scope="module")
def slow_engine(simulators):
    return simulators("--decode-ms-per-token", DECODE_MS, "--prefill-ms-per-token", "0.05", "--max-num-seqs", "32")


@pytest.fixture
def typing(gateway, alice, slow_engine):
    add_deployment(make_model_version(MODEL), tenant=None, name="typing-sim", urls=[slow_engine.url])
    server = gateway()
    server.wait_until_serving(alice.key.raw, MODEL)
    wait_for(lambda: server.app.state.supersede.active, 10)
    assert server.app.state.supersede.active, "the gateway never subscribed to its supersession channel"
    return server


def engine_metrics(engine) -> str:
    return httpx.get(engine.url + "/metrics", timeout=10).text


def aborted(engine) -> float:
    return metric(engine_metrics(engine), "vllm:request_success", finished_reason="abort")


def rows_for(tenant, count: int) -> list:
    assert wait_for(lambda: len(usage_rows(tenant=tenant)) >= count, 20), usage_rows(tenant=tenant)
    return usage_rows(tenant=tenant)


def test_twenty_keystrokes_leave_only_the_last_running_and_meter_the_rest_superseded(typing, alice, slow_engine):
    aborted_before = aborted(slow_engine)
    stop = running_sampler(slow_engine.url + "/metrics")
    typist = Typist(typing.url, alice.key.raw, MODEL, headers={SESSION: "editor-1"}, max_tokens=64)
    strokes = typist.type("def total(values):\n    return ", "sum(values)+1234567", gap=0.05)
    samples = stop()

    last, earlier = strokes[-1], strokes[:-1]
    assert last.completed and last.tokens == 64, "\n".join(map(str, strokes))
    for stroke, following in zip(earlier, strokes[1:]):
        # At most the last runs to completion, plus any that finished before the next keystroke went out.
        assert stroke.superseded or (stroke.completed and stroke.ended_at <= following.sent_at), stroke
        assert not stroke.exception, stroke
    superseded = [s for s in earlier if s.superseded]
    assert len(superseded) >= 15, [s for s in earlier if not s.superseded]
    # Cut mid-stream: an error event ends the stream; superseded before the stream began: a 410 answer.
    assert all(s.status == 200 or (s.status == 410 and not s.tokens) for s in superseded), superseded
    assert all(s.error["type"] == "superseded" for s in superseded)

    # Upstream: every superseded request that reached the engine was aborted there, and while the last
    # request still generated, the engine ran it alone (its running count dropped from the keystrokes').
    assert wait_for(lambda: metric(engine_metrics(slow_engine), "vllm:num_requests_running") == 0, 20)
    rows = {row.request_id: row for row in rows_for(alice.tenant, len(strokes))}
    reached = [s for s in superseded if rows[s.request_id].instance_id is not None]
    aborts = aborted(slow_engine) - aborted_before
    assert sum(1 for s in superseded if s.tokens) <= aborts <= len(superseded), (aborts, len(superseded))
    assert len(reached) >= aborts - 1
    last_alone = [n for t, n in samples if last.first_token_at and t > last.first_token_at + 0.5 and
                  t < last.ended_at - 0.1]
    # Unsuperseded, all 20 (2 s each, sent within 1 s) would run at once; aborted, only a few ever overlap.
    assert samples and max(n for _, n in samples) < 10, samples
    assert not last_alone or min(last_alone) <= 1, samples

    # Metered: outcome superseded, billed for the prompt and the tokens generated before the cut.
    for stroke in superseded:
        row = rows[stroke.request_id]
        assert row.outcome == "superseded" and row.status_code == stroke.status, row
        assert stroke.tokens <= row.completion_tokens <= stroke.tokens + 1, (stroke, row.completion_tokens)
        if row.instance_id is not None and stroke.tokens:
            assert row.prompt_tokens > 0
    assert rows[last.request_id].outcome == "ok" and rows[last.request_id].completion_tokens == 64


def test_a_superseded_non_streamed_request_gets_410(typing, alice, slow_engine):
    typist = Typist(typing.url, alice.key.raw, MODEL, headers={SESSION: "editor-2"}, max_tokens=48, stream=False)
    first, second = typist.type("import os\n", "ab", gap=0.4)
    assert second.completed, second
    assert first.status == 410 and first.superseded and first.error["type"] == "superseded", first
    rows = {row.request_id: row for row in rows_for(alice.tenant, 2)}
    row = rows[first.request_id]
    assert row.outcome == "superseded" and row.status_code == 410
    assert row.prompt_tokens > 0  # it reached the engine, whose prompt work is billed
    assert wait_for(lambda: metric(engine_metrics(slow_engine), "vllm:num_requests_running") == 0, 20)


def test_the_answer_says_not_to_retry(typing, alice):
    answers: list = []

    def send(prompt: str) -> None:
        answers.append(httpx.post(typing.url + "/v1/completions", timeout=60, json={
            "model": MODEL, "prompt": prompt, "max_tokens": 32}, headers={
            "authorization": f"Bearer {alice.key.raw}", SESSION: "editor-3"}))

    thread = threading.Thread(target=send, args=("x = ",))
    thread.start()
    time.sleep(0.3)
    send("x = 1")
    thread.join(60)
    refused = next(a for a in answers if a.status_code != 200)
    assert refused.status_code == 410 and refused.headers["x-should-retry"] == "false"
    assert refused.json()["error"]["code"] == "superseded"


def overlapping(typing, key: str, first_headers: dict, second_headers: dict, endpoint="/v1/completions"):
    """Two requests 0.3 s apart, both long enough to overlap; returns both keystrokes."""
    one = Typist(typing.url, key, MODEL, headers=first_headers, max_tokens=32, endpoint=endpoint)
    two = Typist(typing.url, key, MODEL, headers=second_headers, max_tokens=32, endpoint=endpoint)
    holder: list = []
    thread = threading.Thread(target=lambda: holder.extend(one.type("a = ", "1", gap=0)))
    thread.start()
    time.sleep(0.3)
    second = two.type("b = ", "2", gap=0)[0]
    thread.join(60)
    return holder[0], second


def test_different_sessions_never_supersede_each_other(typing, alice):
    first, second = overlapping(typing, alice.key.raw, {SESSION: "left"}, {SESSION: "right"})
    assert first.completed and second.completed, (first, second)


def test_the_file_and_user_name_a_session_when_the_header_does_not(typing, alice):
    one = Typist(typing.url, alice.key.raw, MODEL, headers={FILE: "src/app.py"}, max_tokens=32)
    one_body = one.body
    one.body = lambda prompt: {**one_body(prompt), "user": "dev-7"}  # type: ignore[method-assign]
    strokes = one.type("def f(): ", "ab", gap=0.3)
    assert strokes[0].superseded and strokes[1].completed, strokes
    other_user = Typist(typing.url, alice.key.raw, MODEL, headers={FILE: "src/app.py"}, max_tokens=32)
    bodies = iter(["dev-1", "dev-2"])
    other_body = other_user.body
    other_user.body = lambda prompt: {**other_body(prompt), "user": next(bodies)}  # type: ignore[method-assign]
    strokes = other_user.type("def f(): ", "ab", gap=0.3)
    assert strokes[0].completed and strokes[1].completed, strokes


def test_a_non_interactive_request_is_never_superseded(typing, alice):
    first, second = overlapping(typing, alice.key.raw, {SESSION: "batchy", INTERACTIVE: "false"},
                                {SESSION: "batchy"})
    assert first.completed and second.completed, (first, second)
    first, second = overlapping(typing, alice.key.raw, {SESSION: "batchy2", "x-switchyard-priority": "batch"},
                                {SESSION: "batchy2"})
    assert first.completed and second.completed, (first, second)


def test_chat_is_superseded_only_when_marked_interactive(typing, alice):
    chat = "/v1/chat/completions"
    first, second = overlapping(typing, alice.key.raw, {SESSION: "chat"}, {SESSION: "chat"}, endpoint=chat)
    assert first.completed and second.completed, (first, second)
    marked = {SESSION: "chat-2", INTERACTIVE: "true"}
    first, second = overlapping(typing, alice.key.raw, marked, marked, endpoint=chat)
    assert first.superseded and second.completed, (first, second)


def test_a_tenant_with_the_setting_off_is_never_superseded(typing, alice):
    from tenants.services import update_tenant

    update_tenant(alice.tenant, cancel_superseded=False, actor=SYSTEM)
    typing.wait_synced()
    assert wait_for(lambda: not typing.app.state.snapshot.tenants[alice.tenant.pk].cancel_superseded, 10)
    first, second = overlapping(typing, alice.key.raw, {SESSION: "off"}, {SESSION: "off"})
    assert first.completed and second.completed, (first, second)


def test_another_tenant_with_the_same_session_id_does_not_supersede(typing, alice, bob):
    first_holder: list = []
    one = Typist(typing.url, alice.key.raw, MODEL, headers={SESSION: "shared-id"}, max_tokens=32)
    two = Typist(typing.url, bob.key.raw, MODEL, headers={SESSION: "shared-id"}, max_tokens=32)
    thread = threading.Thread(target=lambda: first_holder.extend(one.type("a = ", "1", gap=0)))
    thread.start()
    time.sleep(0.3)
    second = two.type("b = ", "2", gap=0)[0]
    thread.join(60)
    assert first_holder[0].completed and second.completed, (first_holder, second)


def test_a_second_key_of_the_same_tenant_does_not_supersede(typing, alice):
    other = inference_key(alice.tenant, user=alice.user)
    holder: list = []
    one = Typist(typing.url, alice.key.raw, MODEL, headers={SESSION: "mine"}, max_tokens=32)
    two = Typist(typing.url, other.raw, MODEL, headers={SESSION: "mine"}, max_tokens=32)
    thread = threading.Thread(target=lambda: holder.extend(one.type("a = ", "1", gap=0)))
    thread.start()
    time.sleep(0.3)
    second = two.type("b = ", "2", gap=0)[0]
    thread.join(60)
    assert holder[0].completed and second.completed, (holder, second)


@pytest.mark.parametrize("value", ["maybe", "TRUE!", ""])
def test_a_bad_interactive_header_is_a_400(typing, alice, value):
    answer = typing.post("/v1/completions", alice.key.raw, {"model": MODEL, "prompt": "x", "max_tokens": 2},
                         headers={INTERACTIVE: value})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_interactive_header"


def test_an_overlong_session_id_is_a_400(typing, alice):
    answer = typing.post("/v1/completions", alice.key.raw, {"model": MODEL, "prompt": "x", "max_tokens": 2},
                         headers={SESSION: "s" * 2000})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_session_header"


def test_without_redis_requests_run_as_usual(gateway, alice, slow_engine):
    from tests.processes import free_port

    add_deployment(make_model_version(MODEL), tenant=None, name="typing-sim", urls=[slow_engine.url])
    server = gateway(redis_url=f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    server.wait_until_serving(alice.key.raw, MODEL)
    typist = Typist(server.url, alice.key.raw, MODEL, headers={SESSION: "no-redis"}, max_tokens=16)
    strokes = typist.type("y = ", "123", gap=0.05)
    assert all(s.completed for s in strokes), strokes
    assert not server.app.state.supersede.active
