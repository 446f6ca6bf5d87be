"""Calling an engine and relaying its answer: failover before the first byte, never after.

Timeouts: connect (the session's), first byte (until the engine's response headers — for a
non-streaming request that is the whole generation — and, for a stream, until its first event),
idle (between body reads after that).
The engine's errors never reach the client as they are: every non-2xx answer, and an error event
that ends a stream, is re-shaped into OpenAI's error body (gateway/pipeline/engine_errors.py).
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from dataclasses import dataclass

from gateway import errors
from gateway.clients.engine import UpstreamClient, UpstreamError, UpstreamResponse
from gateway.config.snapshot import Upstream
from gateway.pipeline.asgi_io import JSON_HEADERS, SSE_HEADERS
from gateway.pipeline.engine_errors import MAX_ERROR_BODY, engine_error
from gateway.pipeline.sse import SseRelay

log = logging.getLogger("gateway.proxy")
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
ERROR_BODY_SECONDS = 2.0  # for an engine's error answer to arrive whole (it comes with its headers, as a rule)
FALLBACK_BUDGET = "fallback_budget"  # the failure kind of an engine slower than the fallback budget


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect: float
    first_byte: float
    idle: float


class UpstreamFailure(Exception):
    """An engine call that failed before its first byte; `retryable` says whether to try another."""

    def __init__(self, kind: str, retryable: bool, error: errors.GatewayError):
        super().__init__(kind)
        self.kind = kind
        self.retryable = retryable
        self.error = error


async def open_upstream(client: UpstreamClient, upstream: Upstream, kind: str, payload: bytes,
                        rid: str, timeouts: Timeouts, budget: float | None = None) -> UpstreamResponse:
    """POST to the engine and wait for its response headers; 5xx and connect errors raise.

    With a `budget` (seconds; a fallback model is available) a slower engine raises a
    `FALLBACK_BUDGET` failure instead of being waited for until the first-byte timeout.
    """
    try:
        response = await client.post(upstream.url + PATHS[kind], payload,
                                     ((b"content-type", b"application/json"), (b"x-request-id", rid.encode())),
                                     min(budget, timeouts.first_byte) if budget else timeouts.first_byte)
    except TimeoutError:
        if budget:
            raise UpstreamFailure(FALLBACK_BUDGET, False, errors.upstream_timeout()) from None
        raise UpstreamFailure("first_byte_timeout", False, errors.upstream_timeout()) from None
    except UpstreamError:  # refused, reset, no connection within the connect timeout, closed before the headers
        raise UpstreamFailure("connect", True, errors.upstream_failed()) from None
    if response.status >= 500:  # retried on another engine; the last one's message is the client's
        error = engine_error(response.status, await error_body(response, ERROR_BODY_SECONDS))
        response.close()
        raise UpstreamFailure(f"status_{response.status}", True, error)
    return response


async def error_body(response: UpstreamResponse, timeout: float) -> bytes:
    """An error answer's body, up to MAX_ERROR_BODY + 1 bytes (more is too large to use) within
    `timeout`; what arrived by then if it is slower, or fails."""
    parts, size = [], 0
    try:
        async with asyncio.timeout(timeout):
            while size <= MAX_ERROR_BODY:
                chunk = await response.readany()
                if not chunk:
                    break
                parts.append(chunk)
                size += len(chunk)
    except (TimeoutError, UpstreamError):
        pass
    return b"".join(parts)[:MAX_ERROR_BODY + 1]


async def first_chunk(response: UpstreamResponse, budget: float) -> bytes:
    """A stream's first body bytes within the budget (engines send stream headers at once)."""
    try:
        async with asyncio.timeout(budget):
            return await response.readany()
    except TimeoutError:
        response.close()  # aborts the generation on the engine
        raise UpstreamFailure(FALLBACK_BUDGET, False, errors.upstream_timeout()) from None


class ClientStream:
    """The client's side of the exchange: what status went out and whether the answer is complete."""

    __slots__ = ("_send", "ids", "status", "complete", "extra_headers")

    def __init__(self, send, ids: list):
        self._send = send
        self.ids = ids  # the request's id headers (`gateway.pipeline.asgi_io.request_ids`)
        self.status = 0
        self.complete = False
        self.extra_headers: list = []

    @property
    def started(self) -> bool:
        return self.status != 0

    async def start(self, status: int, headers: list, length: int | None = None) -> None:
        headers = [*headers, *self.ids, *self.extra_headers]
        if length is not None:
            headers.append((b"content-length", str(length).encode()))
        self.status = status
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def body(self, data: bytes, more: bool) -> None:
        self.complete = not more  # before the await: a disconnect seen after this is no cancellation
        await self._send({"type": "http.response.body", "body": data, "more_body": more})

    async def whole(self, status: int, headers: list, body: bytes) -> None:
        await self.start(status, headers, len(body))
        await self.body(body, False)


async def relay_json(response: UpstreamResponse, client: ClientStream, record, idle: float) -> bytes:
    """A non-streaming answer: read it whole, adopt its usage, send it on unchanged; returns it.

    An error answer (not 2xx) goes out re-shaped instead, whatever its body was."""
    if response.status >= 300:
        error = engine_error(response.status, await error_body(response, min(idle, ERROR_BODY_SECONDS)))
        record.mark_first_byte()
        body = error.body()
        await client.whole(error.status, [*JSON_HEADERS, *error.headers], body)
        return body
    body = await response.read() if response.complete else await _rest_of(response, idle)
    record.mark_first_byte()
    if body[:1] != b"{" and body.lstrip()[:1] != b"{":  # an HTML page from a proxy, a cut answer: not an answer
        raise UpstreamFailure("not_json", True, errors.GatewayError(
            502, "upstream_error", "The model server's answer was not a JSON object."))
    if response.status == 200:
        record.take_usage(usage_of(body))
    await client.whole(response.status, [(b"content-type", response.content_type or b"application/json")], body)
    return body


async def _rest_of(response: UpstreamResponse, idle: float) -> bytes:
    """The body of an answer whose headers came ahead of it (the usual answer arrives whole with them).

    An engine that stops sending it for the idle timeout, or drops the connection, fails the request
    with no retry (its headers are its first byte: the engine did the work, or is stuck doing it)."""
    try:
        async with asyncio.timeout(idle):
            return await response.read()
    except TimeoutError:
        raise UpstreamFailure("idle_timeout", False, errors.upstream_timeout()) from None
    except UpstreamError:
        raise UpstreamFailure("mid_body", False, errors.upstream_failed()) from None


_USAGE_KEY = re.compile(rb'"usage"\s*:\s*')
_DECODER = json.JSONDecoder()


def usage_of(body: bytes) -> dict | None:
    """The `usage` object of a JSON answer, if it has one.

    Engines put `usage` last, so the object is decoded from its key on, not the whole answer
    (the completion text can be long); anything unexpected falls back to a full parse. Only a
    key can be followed by a colon, so a completion whose text is "usage" cannot be mistaken."""
    at = body.rfind(b'"usage"')
    if at != -1:
        found = _USAGE_KEY.match(body, at)
        if found:
            try:
                usage, _ = _DECODER.raw_decode(body[found.end():].decode())
            except ValueError:
                usage = None
            if isinstance(usage, dict) and "prompt_tokens" in usage:
                return usage
    try:
        payload = json.loads(body)
    except ValueError:
        return None
    return payload.get("usage") if isinstance(payload, dict) else None


async def relay_stream(response: UpstreamResponse, client: ClientStream, record, relay: SseRelay,
                       idle: float, first: bytes | None = None, first_by: float | None = None) -> None:
    """SSE pass-through; ends the stream itself on an idle timeout, engine error or token cap.

    `first` is the body's first chunk when it was already read (to meet a fallback budget).
    `first_by` (time.monotonic()) bounds the wait for the first chunk instead of `idle`: an engine sends a
    stream's headers at once and its first event with the first token, so a request waiting in the engine's
    queue is still before its first byte (the first-byte timeout's), not idle between tokens.
    """
    if response.status != 200:  # the engine refused the request (4xx): its error, re-shaped
        await relay_json(response, client, record, idle)
        return
    kind = (response.content_type or b"")[:17]  # as long as b"text/event-stream"
    if kind != b"text/event-stream" and kind.lower() != b"text/event-stream":
        raise UpstreamFailure("not_sse", True, errors.GatewayError(  # a proxy's page: nothing went out yet
            502, "upstream_error", "The model server's answer was not an event stream."))
    await client.start(200, SSE_HEADERS)
    try:
        await _pump(response, client, record, relay, idle, first, first_by)
    except TimeoutError:
        await _end_with_error(client, relay, 504, "upstream_timeout", "The model server stopped sending.")
        raise UpstreamFailure("idle_timeout", False, errors.upstream_timeout()) from None
    except UpstreamError:
        await _end_with_error(client, relay, 502, "upstream_error", "The model server failed mid-stream.")
        raise UpstreamFailure("mid_stream", False, errors.upstream_failed()) from None
    finally:
        if relay.usage:
            record.take_usage(relay.usage)
        else:
            _bill_streamed(record, relay)
    error = relay.engine_error
    if error is not None:  # the engine ended the stream with an error event: sent on re-shaped, and [DONE]
        await client.body(b"", False)
        if error.status >= 500:
            raise UpstreamFailure("stream_error", False, error)  # counted against the engine
        record.outcome = "client_error"
        return
    if relay.cut:
        await _end_with_error(client, relay, 429, "budget_exceeded", "The token budget ran out mid-stream.")
    elif not relay.finished:
        await client.body(b"data: [DONE]\n\n", False)
    else:
        await client.body(b"", False)


async def _pump(response, client: ClientStream, record, relay: SseRelay, idle: float, first: bytes | None,
                first_by: float | None) -> None:
    chunk = first
    while True:
        if chunk is None:
            wait = idle if first_by is None or record.ttft_ms is not None else max(idle, first_by - time.monotonic())
            async with asyncio.timeout(wait):
                chunk = await response.readany()
        if not chunk:
            return
        record.mark_first_byte()
        out = relay.feed(chunk)
        if out:
            await client.body(out, True)
        if relay.cut or relay.engine_error is not None:
            return  # the caller closes the engine's response, which aborts its generation
        chunk = None


def _bill_streamed(record, relay: SseRelay) -> None:
    """No final usage chunk (cut, cancelled, failed): bill the tokens that were streamed, and the
    prompts' tokens if the chunks' running usage told them (else the estimate stays)."""
    record.completion_tokens = max(record.completion_tokens, relay.streamed_tokens)
    if relay.prompt_tokens is not None:
        record.prompt_tokens = relay.prompt_tokens


async def _end_with_error(client: ClientStream, relay: SseRelay, status: int, code: str, message: str) -> None:
    relay.finished = True
    await client.body(errors.sse_error_event(status, code, message), False)
