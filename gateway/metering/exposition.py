"""The metrics listener's ASGI app: `GET /metrics`, on a port of its own, never on the public one.

The public port serves API clients from anywhere; the series name tenants, models and engines, so
they are served apart (loopback by default) and, when `SWITCHYARD_METRICS_TOKEN` is set, only to a
scraper that sends it as `Authorization: Bearer <token>` (docs/gateway.md, "Metrics").
"""
from __future__ import annotations

import hmac
import os
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST

from gateway.errors import error_body

PATH = "/metrics"


class MetricsEndpoint:
    """Serves `render()` at GET /metrics, to the token's holder when a token is set; 404 elsewhere."""

    def __init__(self, render: Callable[[], bytes], token: str = ""):
        self.render = render
        self._expected = f"Bearer {token}".encode() if token else None
        self._pid = str(os.getpid()).encode()  # which worker answered (they all show the same merged view)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != PATH:
            return await _error(send, 404, "not_found", "Only /metrics is served here.")
        if scope["method"] != "GET":
            return await _error(send, 405, "method_not_allowed", "Use GET for /metrics.")
        if not self._authorized(scope):
            return await _error(send, 401, "invalid_metrics_token", "Send the metrics token as a Bearer token.",
                                [(b"www-authenticate", b'Bearer realm="metrics"')])
        await _respond(send, 200, self.render(), [(b"content-type", CONTENT_TYPE_LATEST.encode()),
                                                  (b"x-switchyard-worker-pid", self._pid)])

    def _authorized(self, scope) -> bool:
        if self._expected is None:
            return True
        sent = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
        return hmac.compare_digest(sent, self._expected)


async def _error(send, status: int, code: str, message: str, headers: list | None = None) -> None:
    await _respond(send, status, error_body(status, code, message),
                   [(b"content-type", b"application/json"), *(headers or [])])


async def _respond(send, status: int, body: bytes, headers: list) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
