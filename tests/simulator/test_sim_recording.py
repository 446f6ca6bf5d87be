"""`--record-requests`: what the engine received, kept byte for byte (tests read it back)."""
from __future__ import annotations

import asyncio

import httpx
from sim_helpers import MODEL

from simulator.app import build_app
from simulator.config import SimulatorConfig
from simulator.recording import read_requests


def _post_all(app, bodies: list[bytes]) -> list[int]:
    async def scenario() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            statuses = [(await client.post("/v1/completions", content=body,
                                           headers={"x-request-id": f"r{i}"})).status_code
                        for i, body in enumerate(bodies)]
        await app.engine.stop()
        return statuses

    return asyncio.run(scenario())


def test_every_generation_body_is_recorded_as_received_even_the_refused_ones(tmp_path):
    path = tmp_path / "requests.log"
    app = build_app(SimulatorConfig(served_model_name=MODEL, decode_ms_per_token=0, prefill_ms_per_token=0,
                                    record_requests=str(path)))
    bodies = [b'{"model": "%s", "prompt": "line one\\nline two", "max_tokens": 1}' % MODEL.encode(),
              b"not json\n\xff with a newline", b"{}"]
    assert _post_all(app, bodies) == [200, 400, 400]
    records = read_requests(path)
    assert [body for _, body in records] == bodies
    assert [head["path"] for head, _ in records] == ["/v1/completions"] * 3
    assert ["x-request-id", "r1"] in records[1][0]["headers"]

