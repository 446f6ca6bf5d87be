"""Small ASGI helpers: headers, bounded body reading, whole responses."""
from __future__ import annotations

import os
import re

from gateway.errors import GatewayError, body_too_large, error_body

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
_SAFE_REQUEST_ID = re.compile(rb"^[A-Za-z0-9._:-]{1,64}$")


HEADERS_BY_NAME = "switchyard.headers"  # the scope key of the request's headers as a dict, made once


def header(scope: dict, name: bytes) -> bytes | None:
    """The first value of a request header (names arrive lower-cased from the server)."""
    table = scope.get(HEADERS_BY_NAME)
    if table is None:  # reversed: a repeated header keeps its first value, as a linear scan would
        table = scope[HEADERS_BY_NAME] = dict(reversed(scope["headers"]))
    return table.get(name)


def request_id(scope: dict) -> str:
    """The caller's x-request-id when it is safe to log and store, else a fresh one."""
    incoming = header(scope, b"x-request-id")
    if incoming and _SAFE_REQUEST_ID.match(incoming):
        return incoming.decode()
    return os.urandom(16).hex()  # 128 random bits like uuid4().hex, without building a UUID object


async def read_body(scope: dict, receive, limit: int) -> bytes:
    """The whole request body; 413 from content-length up front, or as soon as it grows past limit."""
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise body_too_large(limit)
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise body_too_large(limit)
        parts.append(chunk)
        if not message.get("more_body"):
            return parts[0] if len(parts) == 1 else b"".join(parts)


class ClientGone(Exception):
    """The client disconnected before the answer was complete."""


async def send_response(send, status: int, body: bytes, headers: list) -> None:
    """A complete response with a content-length."""
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def send_error(send, error: GatewayError, rid: str) -> None:
    """An OpenAI-shaped error with x-request-id and the error's own headers."""
    headers = [*JSON_HEADERS, (b"x-request-id", rid.encode()), *error.headers]
    await send_response(send, error.status, error.body(), headers)


async def send_plain_error(send, status: int, code: str, message: str, rid: str) -> None:
    """An error that needs no GatewayError (404/405 on unknown routes)."""
    await send_response(send, status, error_body(status, code, message),
                        [*JSON_HEADERS, (b"x-request-id", rid.encode())])
