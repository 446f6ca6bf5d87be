"""Small HTTP helpers shared by the simulator tests."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client.parser import text_string_to_metric_families

MODEL = "sim-test"

# One pooled, thread-safe client: fresh connections per call dominate test time.
CLIENT = httpx.Client(timeout=30)


def complete(base: str, prompt: str, max_tokens: int = 4, **extra) -> dict:
    """POST a non-streaming completion and return the decoded JSON."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, **extra}
    resp = CLIENT.post(base + "/v1/completions", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def cached_tokens(result: dict) -> int:
    """prompt_tokens_details.cached_tokens from a response."""
    return result["usage"]["prompt_tokens_details"]["cached_tokens"]


def scrape(base: str) -> dict:
    """Parse /metrics into {family_name: family}."""
    text = CLIENT.get(base + "/metrics").text
    return {fam.name: fam for fam in text_string_to_metric_families(text)}


def sample_value(families: dict, family: str, sample: str, **labels) -> float:
    """Value of one sample (by sample name and label subset)."""
    for s in families[family].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError(f"{sample} {labels}")


def long_text(seed: str, n_chars: int) -> str:
    """Deterministic text of exactly ``n_chars`` characters."""
    return (seed * (n_chars // len(seed) + 1))[:n_chars]


async def leave_mid_request(app, path: str, body: bytes, after: float = 0.05) -> list:
    """Call ``app`` with ``body`` and disconnect (via receive()) ``after`` seconds; what it sent."""
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    gone = asyncio.Event()

    async def receive() -> dict:
        if messages:
            return messages.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    sent: list = []

    async def send(message: dict) -> None:
        sent.append(message)

    handler = asyncio.create_task(app({"type": "http", "path": path, "method": "POST"}, receive, send))
    await asyncio.sleep(after)
    gone.set()  # the client hangs up mid-generation
    await asyncio.wait_for(handler, 5)
    return sent
