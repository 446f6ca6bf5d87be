"""One request and its response: the ASGI `receive` and `send` of one application call."""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from gateway.server.wire import (
    APP_FAILED,
    BODY_HIGH_WATER,
    CONNECTION,
    CONTENT_LENGTH,
    CONTINUE,
    DISCONNECT,
    ORDINARY,
    header_kind,
    status_line,
)

log = logging.getLogger("gateway.server")

if TYPE_CHECKING:
    from gateway.server.connection import HttpConnection


class Cycle:
    """One request and its response: the ASGI `receive` and `send` of one application call."""

    __slots__ = ("conn", "scope", "keep_alive", "task", "chunks", "buffered", "more_body", "ready", "waiter",
                 "disconnected", "started", "complete", "chunked", "remaining", "head", "expect_continue",
                 "head_only", "disconnect_callback")

    def __init__(self, conn: HttpConnection, scope: dict, keep_alive: bool):
        self.conn, self.scope, self.keep_alive = conn, scope, keep_alive
        self.task: asyncio.Task | None = None
        self.chunks: list[bytes] = []
        self.buffered = 0
        self.more_body = True  # until the parser saw the end of this request's body
        self.ready = False  # something for `receive` to return without waiting
        self.waiter: asyncio.Future | None = None
        self.disconnected = self.started = self.complete = self.chunked = False
        self.remaining: int | None = None  # content-length still to send
        self.head: bytes | None = None  # the response head, not written yet
        self.expect_continue = conn.expect_continue
        self.head_only = scope["method"] == "HEAD"
        self.disconnect_callback = None

    # From the connection
    def feed(self, body: bytes) -> None:
        if self.complete:
            return  # answered without reading it all (413): the rest is dropped, then the connection
        self.chunks.append(body)
        self.buffered += len(body)
        self._wake()
        if self.buffered >= BODY_HIGH_WATER:
            self.conn.body_backlog(self)

    def finish_body(self) -> None:
        self.more_body = False
        self._wake()

    def gone(self) -> None:
        self.disconnected = True
        self._wake()
        callback, self.disconnect_callback = self.disconnect_callback, None
        if callback is not None and not self.complete:
            callback()

    def on_disconnect(self, callback) -> None:
        """The `switchyard.disconnect` extension: call `callback` if the client leaves before the
        response is complete (at once if it already has); None unregisters."""
        if callback is not None and self.disconnected and not self.complete:
            callback()
            return
        self.disconnect_callback = callback

    def _wake(self) -> None:
        self.ready = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # The application call
    async def run(self) -> None:
        conn = self.conn
        try:
            await conn.state.app(self.scope, self.receive, self.send)
        except BaseException as error:
            if not isinstance(error, asyncio.CancelledError):
                log.exception("the application failed on %s %s", self.scope["method"], self.scope["path"])
            if not self.started and not conn.closed:
                conn.write(APP_FAILED)
            conn.close()
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
        else:
            if not self.complete:  # the application returned without finishing its response
                if not self.started and not conn.closed:
                    conn.write(APP_FAILED)
                conn.close()
        finally:
            self.task = None
            if not self.complete or self.more_body:  # unfinished, or the request body not read to its end
                self.keep_alive = False
            conn.answered(self)
            # The scope's extensions hold self.on_disconnect: a reference cycle (self -> scope ->
            # extensions -> bound method -> self) that only the cyclic GC would free, ten objects a
            # request. Dropping the scope lets reference counting free them at once.
            self.scope = None  # type: ignore[assignment]  # done with it

    async def receive(self) -> dict:
        if self.expect_continue:
            self.expect_continue = False
            if self.more_body and not self.conn.closed:
                self.conn.write(CONTINUE)
        while True:
            if not self.ready and not self.disconnected and not self.complete:
                self.waiter = self.conn.loop.create_future()
                try:
                    await self.waiter
                finally:
                    self.waiter = None
            self.ready = False
            if self.disconnected or self.complete:
                return DISCONNECT
            chunks = self.chunks
            body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            chunks.clear()
            self.buffered = 0
            if self.conn.read_paused:
                self.conn.body_consumed(self)
            if body or not self.more_body:
                return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def send(self, message: dict) -> None:
        if self.disconnected:
            return  # the client left: what the application still sends goes nowhere
        kind = message["type"]
        if not self.started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', got {kind!r}")
            self._start_response(message["status"], message.get("headers") or ())
            return
        if kind != "http.response.body" or self.complete:
            raise RuntimeError(f"unexpected ASGI message {kind!r} after the response "
                               f"{'completed' if self.complete else 'started'}")
        body, more = message.get("body", b""), message.get("more_body", False)
        if self.head_only:
            body = b""
        if self.chunked:
            data = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
            if not more:
                data += b"0\r\n\r\n"
        else:
            data = body
            if self.remaining is not None:
                self.remaining -= len(body)
                if self.remaining < 0 or (not more and self.remaining > 0):
                    self.keep_alive = False
                    raise RuntimeError("the response body does not match its content-length")
        conn = self.conn
        if self.head is not None:
            data, self.head = self.head + data, None
        if data:
            conn.write(data)
        if not more:
            self.complete = True
            self._wake()  # a `receive` waiting for the client's departure returns now
            return
        if conn.write_paused:
            await conn.drain()

    def _start_response(self, status: int, headers) -> None:
        self.started = True
        if self.more_body:  # answering before the request body arrived whole: the connection ends
            self.keep_alive = False
        parts = [status_line(status)]
        length = None
        for name, value in headers:
            kind = header_kind(name)
            if kind is ORDINARY:
                parts.append(b"%s: %s\r\n" % (name, value))
            elif kind is CONTENT_LENGTH:
                length = int(value)  # written below, once
            elif kind is CONNECTION:
                if value.lower().find(b"close") >= 0:
                    self.keep_alive = False
                else:
                    parts.append(b"%s: %s\r\n" % (name, value))
            # transfer-encoding: the server frames the body itself
        parts.append(self.conn.state.date)
        if not self.keep_alive:
            parts.append(b"connection: close\r\n")
        bodiless = self.head_only or status in (204, 304) or status < 200
        if length is not None:
            parts.append(b"content-length: %d\r\n" % length)
            self.remaining = None if self.head_only else length
        elif not bodiless:
            self.chunked = True
            parts.append(b"transfer-encoding: chunked\r\n")
        parts.append(b"\r\n")
        head = b"".join(parts)
        # Every part ends with the only CR LF in it, so a value that holds a CR or LF shows in the counts.
        if head.count(b"\n") != len(parts) or head.count(b"\r") != len(parts):
            raise RuntimeError(f"invalid response header {_value_with_line_break(headers)!r}")
        self.head = head
        # Sent with the first body bytes if they come in this event-loop iteration, else alone.
        self.conn.state.hold_head(self, self.conn.loop)

    def flush_head(self) -> None:
        if self.head is not None and not self.disconnected:
            head, self.head = self.head, None
            self.conn.write(head)


def _value_with_line_break(headers) -> bytes:
    for name, value in headers:
        if b"\r" in value or b"\n" in value:
            return name
    return b""
