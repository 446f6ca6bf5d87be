"""Fault injection for rollouts against a bad version: --error-rate fails a share of requests at once with
vLLM's 500, --latency-multiplier stretches every modeled step (a slower time to first token),
--hang-after-first-byte stalls a share of requests after their first byte until the client leaves."""
from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import pytest
from sim_helpers import MODEL, sample_value, scrape

from simulator.app import build_app
from simulator.config import SimulatorConfig
from simulator.faults import FaultPicker

ZERO = dict(served_model_name=MODEL, prefill_ms_per_token=0, decode_ms_per_token=0)


def _statuses_and_ttft(config: SimulatorConfig, count: int) -> tuple[list[int], list[float]]:
    async def scenario():
        app = build_app(config)
        statuses, steps = [], []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
            for n in range(count):
                resp = await client.post("/v1/completions", json={"model": MODEL, "prompt": f"p{n} " * 20,
                                                                   "max_tokens": 2})
                statuses.append(resp.status_code)
        steps = [app.engine.step_duration({object(): 40})]  # one prefill step of 40 tokens, as modeled
        await app.engine.stop()
        return statuses, steps

    return asyncio.run(scenario())


def test_error_rate_fails_about_that_share_with_vllms_500():
    statuses, _ = _statuses_and_ttft(SimulatorConfig(served_model_name=MODEL, error_rate=0.2, seed=7,
                                                     prefill_ms_per_token=0, decode_ms_per_token=0), 400)
    failed = statuses.count(500)
    assert set(statuses) == {200, 500}
    assert 40 <= failed <= 120  # 20 % of 400 = 80; a binomial 5 sigma is ±40


def test_error_rate_is_reproducible_for_a_seed_and_zero_fails_nothing():
    config = dict(served_model_name=MODEL, prefill_ms_per_token=0, decode_ms_per_token=0)
    first, _ = _statuses_and_ttft(SimulatorConfig(**config, error_rate=0.3, seed=3), 60)
    again, _ = _statuses_and_ttft(SimulatorConfig(**config, error_rate=0.3, seed=3), 60)
    healthy, _ = _statuses_and_ttft(SimulatorConfig(**config), 60)
    assert first == again
    assert healthy == [200] * 60


def test_latency_multiplier_stretches_the_modeled_prefill():
    _, (plain,) = _statuses_and_ttft(SimulatorConfig(served_model_name=MODEL, prefill_ms_per_token=1), 1)
    _, (slow,) = _statuses_and_ttft(SimulatorConfig(served_model_name=MODEL, prefill_ms_per_token=1,
                                                    latency_multiplier=3), 1)
    assert slow == pytest.approx(3 * plain)


@pytest.mark.parametrize("bad", [{"error_rate": 1.5}, {"error_rate": -0.1}, {"latency_multiplier": 0},
                                 {"hang_after_first_byte": 1.01}, {"hang_after_first_byte": -0.5}])
def test_out_of_range_faults_are_refused(bad):
    with pytest.raises(ValueError):
        SimulatorConfig(**bad)


def test_the_cli_carries_the_fault_flags(start_simulator):
    base = start_simulator("--error-rate", "1", "--prefill-ms-per-token", "0", "--decode-ms-per-token", "0")
    resp = httpx.post(base + "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 1}, timeout=10)
    assert resp.status_code == 500 and resp.json()["error"]["code"] == 500


# ------------------------------------------------------------------ hang after the first byte

def test_hang_after_first_byte_picks_about_that_share_the_same_for_a_seed_and_leaves_error_picks_alone():
    def picks(**faults) -> list[tuple[bool, bool]]:
        picker = FaultPicker(SimulatorConfig(**ZERO, seed=11, **faults))
        return [(picker.fails(), picker.hangs()) for _ in range(400)]

    half = picks(hang_after_first_byte=0.5)
    assert half == picks(hang_after_first_byte=0.5)
    assert 150 <= sum(hang for _, hang in half) <= 250  # 50 % of 400 = 200; a binomial 5 sigma is ±50
    assert not any(hang for _, hang in picks(error_rate=0.3))
    # Set to 0, the hang fault draws nothing: error_rate fails the same requests as without it.
    assert picks(error_rate=0.3) == picks(error_rate=0.3, hang_after_first_byte=0.0)


class Exchange:
    """One request to the ASGI app as a plain ASGI server would make it; the client leaves on `leave()`."""

    def __init__(self, app, body: dict) -> None:
        self.sent: list[dict] = []
        self._body = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]
        self._gone = asyncio.Event()
        self.task = asyncio.create_task(app({"type": "http", "path": "/v1/completions", "method": "POST"},
                                            self._receive, self._send))

    async def _receive(self) -> dict:
        if self._body:
            return self._body.pop()
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict) -> None:
        self.sent.append(message)

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")

    async def leave(self) -> None:
        self._gone.set()
        await asyncio.wait_for(self.task, 5)


def _hung_then_left(stream: bool) -> dict:
    """A one-slot engine whose every request hangs: what the client got, and the engine before and after it left."""
    async def scenario():
        app = build_app(SimulatorConfig(**ZERO, max_num_seqs=1, hang_after_first_byte=1.0))
        hung = Exchange(app, {"model": MODEL, "prompt": "def f(): " * 8, "max_tokens": 8, "stream": stream})
        await asyncio.sleep(0.3)  # long enough for every token of an 8-token answer, many times over
        queued = Exchange(app, {"model": MODEL, "prompt": "x", "max_tokens": 2})
        await asyncio.sleep(0.1)
        engine = app.engine
        seen = {"sent": list(hung.sent), "body": hung.body(), "running": engine.num_running(),
                "waiting": len(engine.waiting), "kv_while_hung": engine.kv.usage(), "queued_done": queued.task.done()}
        await hung.leave()
        await asyncio.sleep(0.1)
        seen.update(finished=dict(engine.stats.finished), hung_done=hung.task.done())
        await queued.leave()
        seen.update(running_after=engine.num_running(), kv_after=engine.kv.usage())
        return seen

    return asyncio.run(scenario())


def test_a_hung_stream_sends_its_first_token_only_holds_its_slot_and_its_abort_frees_it():
    seen = _hung_then_left(stream=True)
    start, *chunks = seen["sent"]
    assert start["status"] == 200 and len(chunks) == 1 and chunks[0]["more_body"]  # the first token, no end
    events = [line for line in seen["body"].decode().splitlines() if line.startswith("data: ")]
    assert len(events) == 1 and json.loads(events[0][6:])["choices"][0]["finish_reason"] is None
    # Stalled, it keeps the engine's only slot and its blocks: the next request waits behind it.
    assert (seen["running"], seen["waiting"], seen["queued_done"]) == (1, 1, False)
    assert seen["kv_while_hung"] > 0
    # The client leaving aborts it: the slot goes to the waiting request, which then hangs in turn.
    assert seen["hung_done"] and seen["finished"]["abort"] == 1
    assert (seen["running_after"], seen["kv_after"]) == (0, 0)


def test_a_hung_whole_answer_sends_its_headers_and_first_byte_only_and_its_abort_frees_the_slot():
    seen = _hung_then_left(stream=False)
    start, first = seen["sent"]
    length = dict(start["headers"])[b"content-length"]
    assert start["status"] == 200 and int(length) > 1  # the headers announce an answer …
    assert first == {"type": "http.response.body", "body": b"{", "more_body": True}  # … of which one byte comes
    assert (seen["running"], seen["waiting"], seen["queued_done"]) == (1, 1, False)
    assert seen["hung_done"] and seen["finished"]["abort"] == 1
    assert (seen["running_after"], seen["kv_after"]) == (0, 0)


@pytest.mark.parametrize("stream", [False, True])
def test_every_choice_of_a_hung_request_of_several_hangs_and_is_freed_with_it(stream):
    async def scenario():
        app = build_app(SimulatorConfig(**ZERO, hang_after_first_byte=1.0))
        hung = Exchange(app, {"model": MODEL, "prompt": "x", "max_tokens": 6, "n": 3, "stream": stream})
        await asyncio.sleep(0.3)
        during = app.engine.num_running(), hung.body()
        await hung.leave()
        return during, app.engine.num_running(), app.engine.stats.finished["abort"]

    (running, body), after, aborted = asyncio.run(scenario())
    assert running == 3 and (after, aborted) == (0, 3)
    if stream:  # each choice's first token, none of their ends
        assert body.count(b"data: {") == 3 and b'"finish_reason":"' not in body and b"[DONE]" not in body
    else:
        assert body == b"{"


def _running(base: str) -> float:
    return sample_value(scrape(base), "vllm:num_requests_running", "vllm:num_requests_running")


def _until(condition, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_the_cli_hangs_a_stream_after_its_first_token_until_the_client_disconnects(start_simulator):
    base = start_simulator("--hang-after-first-byte", "1", "--prefill-ms-per-token", "0", "--decode-ms-per-token", "1")
    body = {"model": MODEL, "prompt": "def f():", "max_tokens": 5, "stream": True}
    with httpx.Client(timeout=httpx.Timeout(10, read=1.0)) as client:
        with client.stream("POST", base + "/v1/completions", json=body) as resp:
            lines = resp.iter_lines()
            first = next(line for line in lines if line)
            assert resp.status_code == 200 and first.startswith("data: {")
            time.sleep(0.3)  # 5 tokens of 1 ms each would all be sent by now
            assert _running(base) == 1
            with pytest.raises(httpx.ReadTimeout):  # nothing more came (httpx then drops the connection)
                next(line for line in lines if line)
    _until(lambda: _running(base) == 0)  # the disconnect aborted it
    assert sample_value(scrape(base), "vllm:request_success", "vllm:request_success_total",
                        finished_reason="abort") == 1


def test_the_cli_hangs_a_whole_answer_after_its_headers_and_first_byte(start_simulator):
    base = start_simulator("--hang-after-first-byte", "1", "--prefill-ms-per-token", "0", "--decode-ms-per-token", "0")
    port = int(base.rsplit(":", 1)[1])
    payload = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 3}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(payload), payload))
        received = b""
        while b"\r\n\r\n" not in received:
            received += sock.recv(4096)
        sock.settimeout(1.0)
        try:
            while True:
                chunk = sock.recv(4096)
                assert chunk, "the engine closed the connection"
                received += chunk
        except socket.timeout:
            pass  # nothing more came: hung
        head, rest = received.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 200") and b"content-length: " in head.lower()
        assert rest == b"{"
        assert _running(base) == 1
    _until(lambda: _running(base) == 0)
