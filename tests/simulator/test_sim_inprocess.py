"""The app is importable and servable in-process (no subprocess)."""

from __future__ import annotations

import asyncio

import httpx
from sim_helpers import MODEL, cached_tokens, complete, leave_mid_request

from simulator.app import build_app
from simulator.config import SimulatorConfig


def test_in_process_uvicorn_zero_latency(inprocess_simulator):
    base = inprocess_simulator(prefill_ms_per_token=0, decode_ms_per_token=0, block_size=4)
    first = complete(base, "x" * 40, max_tokens=16)
    assert first["choices"][0]["finish_reason"] == "length"
    assert first["usage"]["completion_tokens"] == 16
    assert cached_tokens(complete(base, "x" * 40)) == 8  # (10 - 1) // 4 whole blocks


def test_asgi_callable_directly():
    async def scenario() -> tuple[int, dict]:
        app = build_app(SimulatorConfig(served_model_name=MODEL, decode_ms_per_token=0,
                                        prefill_ms_per_token=0))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            resp = await client.post("/v1/chat/completions", json={
                "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        await app.engine.stop()
        return resp.status_code, resp.json()

    status, body = asyncio.run(scenario())
    assert status == 200
    assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] == 2


def test_non_streaming_request_is_aborted_when_its_client_disconnects():
    async def scenario() -> tuple[list, dict]:
        app = build_app(SimulatorConfig(served_model_name=MODEL, decode_ms_per_token=50,
                                        prefill_ms_per_token=0))
        sent = await leave_mid_request(app, "/v1/completions", b'{"prompt": "hello there", "max_tokens": 1000}')
        await app.engine.stop()
        return sent, dict(app.engine.stats.finished)

    sent, finished = asyncio.run(scenario())
    assert sent == []
    assert finished["abort"] == 1 and finished["length"] == 0


def test_request_is_aborted_when_the_gateway_server_reports_its_client_gone():
    """Under gateway/server the disconnect arrives as a callback (switchyard.disconnect), not via receive()."""
    from gateway.server.wire import DISCONNECT_EXTENSION

    async def scenario() -> tuple[list, list, dict]:
        app = build_app(SimulatorConfig(served_model_name=MODEL, decode_ms_per_token=50,
                                        prefill_ms_per_token=0))
        body = b'{"prompt": "hello there", "max_tokens": 1000}'
        registered: list = []

        async def receive() -> dict:
            return {"type": "http.request", "body": body, "more_body": False}

        sent: list = []

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "http", "path": "/v1/completions", "method": "POST",
                 "extensions": {DISCONNECT_EXTENSION: registered.append}}
        handler = asyncio.create_task(app(scope, receive, send))
        await asyncio.sleep(0.05)
        registered[0]()  # the server saw the connection close mid-generation
        await asyncio.wait_for(handler, 5)
        await app.engine.stop()
        return sent, registered, dict(app.engine.stats.finished)

    sent, registered, finished = asyncio.run(scenario())
    assert sent == []
    assert finished["abort"] == 1 and finished["length"] == 0
    assert registered[-1] is None  # the handler withdrew its callback when it ended
