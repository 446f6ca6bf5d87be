"""Small ASGI helpers: headers, bounded body reading, whole responses."""
from __future__ import annotations

import itertools
import os
import re
from typing import Iterator

from gateway.errors import GatewayError, body_too_large, error_body
from gateway.pipeline.redaction import holds_secret

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


def request_ids(scope: dict) -> tuple[str, list]:
    """The gateway's id for this request and the response headers that carry it.

    The id is always minted here, never taken from the caller: it is the usage event's unique
    key, the member of the request's concurrency lease and the name of its budget reservation,
    so two requests must never share one (a client re-sending its own x-request-id would
    otherwise go unmetered, or share a lease). A caller's own x-request-id, when safe to echo
    (1-64 of A-Za-z0-9._:-, and not a secret), comes back as x-client-request-id, as OpenAI's API does.
    """
    rid = mint_request_id()
    headers = [(b"x-request-id", rid.encode())]
    incoming = header(scope, b"x-request-id")
    if incoming and _SAFE_REQUEST_ID.match(incoming) and not holds_secret(incoming.decode()):
        headers.append((b"x-client-request-id", incoming))  # not an API key pasted as an id
    return rid, headers


_id_prefix: str  # set by _new_id_prefix, below
_id_counter: Iterator[int]


def mint_request_id() -> str:
    """32 hex digits: 80 random bits drawn once per process, then a counter."""
    return f"{_id_prefix}{next(_id_counter):012x}"


def _new_id_prefix() -> None:
    global _id_prefix, _id_counter
    _id_prefix, _id_counter = os.urandom(10).hex(), itertools.count(1)


_new_id_prefix()
os.register_at_fork(after_in_child=_new_id_prefix)  # a forked child must not repeat its parent's ids


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


async def send_error(send, error: GatewayError, ids: list) -> None:
    """An OpenAI-shaped error with the request's id headers (`request_ids`) and the error's own."""
    await send_response(send, error.status, error.body(), [*JSON_HEADERS, *ids, *error.headers])


async def send_plain_error(send, status: int, code: str, message: str, ids: list) -> None:
    """An error that needs no GatewayError (404/405 on unknown routes)."""
    await send_response(send, status, error_body(status, code, message), [*JSON_HEADERS, *ids])
