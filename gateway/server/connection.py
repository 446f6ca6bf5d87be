"""One client connection (an asyncio protocol over httptools) and what all connections share."""
from __future__ import annotations

import asyncio
import collections
import email.utils
import time
from urllib.parse import unquote

import httptools

from gateway.server.cycle import Cycle
from gateway.server.wire import ASGI, BODY_HIGH_WATER, DISCONNECT_EXTENSION, MAX_PIPELINED, plain_response

TASK_NAME = "http-request"


class ServerState:
    """What the connections of one server share: the app, limits, the live connections, the date."""

    def __init__(self, app, *, keep_alive_timeout: float, header_timeout: float, max_header_bytes: int,
                 body_timeout: float = 30.0, share=None):
        self.app = app
        self.keep_alive_timeout = keep_alive_timeout
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.max_header_bytes = max_header_bytes
        self.share = share
        self.connections: set[HttpConnection] = set()
        self.in_flight = 0
        self.date = b""
        # The connections' timestamps (idle since, last read, headers started): refreshed by the server's
        # sweep loop every 0.1 s rather than read from the clock several times per request; the timeouts
        # they feed are checked once a second.
        self.now = time.monotonic()
        self.unsent_heads: list[Cycle] = []  # response heads waiting for their first body bytes
        self.tick()

    def tick(self) -> None:
        self.date = b"date: " + email.utils.formatdate(usegmt=True).encode() + b"\r\n"

    def hold_head(self, cycle: Cycle, loop: asyncio.AbstractEventLoop) -> None:
        """Write `cycle`'s head at the end of this event-loop iteration unless its body takes it first;
        one callback for all the responses started in the iteration."""
        if not self.unsent_heads:
            loop.call_soon(self._flush_heads)
        self.unsent_heads.append(cycle)

    def _flush_heads(self) -> None:
        cycles, self.unsent_heads = self.unsent_heads, []
        for cycle in cycles:
            cycle.flush_head()


class HttpConnection(asyncio.Protocol):
    """One client connection: parses requests, runs them one at a time, writes their answers."""

    __slots__ = ("state", "loop", "transport", "parser", "server_addr", "client_addr", "current", "parsing",
                 "queued", "url", "headers", "header_bytes", "parse_started", "idle_since", "read_paused",
                 "write_paused", "drain_waiter", "closed", "shed", "expect_continue", "read_at", "default_tasks")

    def __init__(self, state: ServerState, loop: asyncio.AbstractEventLoop):
        self.state, self.loop = state, loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.server_addr = self.client_addr = None
        self.current: Cycle | None = None  # the request being answered
        self.parsing: Cycle | None = None  # the request whose body is arriving (may be a queued one)
        self.queued: collections.deque[Cycle] = collections.deque()  # pipelined, not started yet
        self.url = b""
        self.headers: list = []
        self.header_bytes = 0
        self.parse_started = 0.0  # when the request now being parsed began; 0 between requests
        self.idle_since = self.read_at = 0.0
        self.read_paused = self.write_paused = self.closed = self.shed = False
        self.drain_waiter: asyncio.Future | None = None
        self.expect_continue = False  # the request being parsed sent `Expect: 100-continue`
        self.default_tasks = loop.get_task_factory() is None

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.server_addr = _address(transport.get_extra_info("sockname"))
        self.client_addr = _address(transport.get_extra_info("peername"))
        self.idle_since = self.state.now
        self.state.connections.add(self)
        if self.state.share is not None:
            self.state.share.opened()

    def data_received(self, data: bytes) -> None:
        self.read_at = self.state.now
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # served as plain HTTP; nothing after it is read
            for cycle in (self.current, *self.queued):
                if cycle is not None:
                    cycle.keep_alive = False
        except httptools.HttpParserError:  # also what a callback raised, wrapped
            if self.header_bytes > self.state.max_header_bytes:
                self._refuse(431, "Request line and headers are too large.")
            elif not self.closed:
                self._refuse(400, "Malformed HTTP request.")

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.state.connections.discard(self)
        if self.state.share is not None:
            self.state.share.closed(self.shed)
        for cycle in (self.current, self.parsing, *self.queued):
            if cycle is not None:
                cycle.gone()
        self.queued.clear()
        self._wake_drain()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._wake_drain()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.url, self.headers, self.header_bytes, self.expect_continue = b"", [], 0, False
        self.parse_started = self.state.now

    def on_url(self, url: bytes) -> None:
        self.url += url
        self.header_bytes += len(url)
        if self.header_bytes > self.state.max_header_bytes:
            raise _HeadersTooLarge

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_bytes += len(name) + len(value) + 4
        if self.header_bytes > self.state.max_header_bytes:
            raise _HeadersTooLarge
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.parse_started = 0.0
        parser = self.parser
        url = self.url
        if url[:1] == b"/" and url.find(b"#") < 0:  # origin form, as good as always: no URL parser needed
            raw_path, _, query = url.partition(b"?")
        else:
            parsed = httptools.parse_url(url)
            raw_path, query = parsed.path, parsed.query or b""
        path = raw_path.decode("ascii")
        if raw_path.find(b"%") >= 0:  # not `in`: bytes.__contains__ tries the operand as an int first (slow)
            path = unquote(path)
        scope = {"type": "http", "asgi": ASGI, "http_version": parser.get_http_version(),
                 "method": _method(parser.get_method()), "scheme": "http", "path": path,
                 "raw_path": raw_path, "query_string": query, "root_path": "",
                 "headers": self.headers, "server": self.server_addr, "client": self.client_addr}
        keep_alive = parser.should_keep_alive()
        if keep_alive and self.state.share is not None and not self.shed and self.state.share.should_shed():
            self.shed, keep_alive = True, False  # answered in full, then closed: the client reconnects
        cycle = Cycle(self, scope, keep_alive)
        scope["extensions"] = {DISCONNECT_EXTENSION: cycle.on_disconnect}
        self.parsing = cycle
        if self.current is None:
            self._start(cycle)
        else:
            self.queued.append(cycle)
            if len(self.queued) >= MAX_PIPELINED:
                self._pause_reading()

    def on_body(self, body: bytes) -> None:
        cycle = self.parsing
        if cycle is not None:
            cycle.feed(body)

    def on_message_complete(self) -> None:
        cycle, self.parsing = self.parsing, None
        if cycle is not None:
            cycle.finish_body()

    # Used by cycles
    def _start(self, cycle: Cycle) -> None:
        self.current = cycle
        self.state.in_flight += 1
        if self.default_tasks:  # named: create_task would format a "Task-<n>" name per request, then rename it
            cycle.task = asyncio.Task(cycle.run(), loop=self.loop, name=TASK_NAME)
        else:
            cycle.task = self.loop.create_task(cycle.run())

    def answered(self, cycle: Cycle) -> None:
        """The current request's response is complete (or abandoned): start the next or wait."""
        if self.current is cycle:
            self.current = None
            self.state.in_flight -= 1
        if self.closed:
            return
        if not cycle.keep_alive:
            self.close()
            return
        if self.queued:
            self._start(self.queued.popleft())
        else:
            self.idle_since = self.state.now
        if self.read_paused and len(self.queued) < MAX_PIPELINED and \
                (self.parsing is None or self.parsing.buffered < BODY_HIGH_WATER):
            self._resume_reading()

    def write(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(data)

    async def drain(self) -> None:
        if self.write_paused and not self.closed:
            self.drain_waiter = self.loop.create_future()
            try:
                await self.drain_waiter
            finally:
                self.drain_waiter = None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.transport.close()

    def body_consumed(self, cycle: Cycle) -> None:
        if self.read_paused and cycle is self.parsing and cycle.buffered < BODY_HIGH_WATER \
                and len(self.queued) < MAX_PIPELINED:
            self._resume_reading()

    def body_backlog(self, cycle: Cycle) -> None:
        if cycle.buffered >= BODY_HIGH_WATER:
            self._pause_reading()

    def sweep(self, now: float) -> None:
        """Drop an idle keep-alive connection past its timeout, or one slow to send its headers."""
        if self.closed:
            return
        if self.parse_started and now - self.parse_started > self.state.header_timeout:
            self._refuse(408, "The request headers did not arrive in time.")
        elif self.parsing is not None and self.parsing.more_body and not self.read_paused and \
                now - self.read_at > self.state.body_timeout:
            self.close()  # a request body that stopped arriving: the request sees a disconnect
        elif self.current is None and not self.queued and self.parse_started == 0.0 and \
                now - self.idle_since > self.state.keep_alive_timeout:
            self.close()

    def _refuse(self, status: int, message: str) -> None:
        """Answer a request that cannot be served (unless one is being answered) and close."""
        if self.current is None and not self.closed:
            self.transport.write(plain_response(status, message))
        self.close()

    def _pause_reading(self) -> None:
        if not self.read_paused and not self.closed:
            self.read_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self.read_paused and not self.closed:
            self.read_paused = False
            self.transport.resume_reading()

    def _wake_drain(self) -> None:
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)


class _HeadersTooLarge(Exception):
    pass


_METHODS = {method.encode(): method for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")}


def _method(raw: bytes) -> str:
    return _METHODS.get(raw) or raw.decode("ascii")


def _address(value):
    if isinstance(value, tuple) and len(value) >= 2:
        return value[0], value[1]
    return None
