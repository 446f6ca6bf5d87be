"""One client connection (an asyncio protocol over httptools) and what all connections share."""
from __future__ import annotations

import asyncio
import collections
import email.utils
import time
from typing import Any
from urllib.parse import unquote

import httptools

from gateway.server import wire
from gateway.server.cycle import Cycle
from gateway.server.wire import ASGI, BODY_HIGH_WATER, DISCONNECT_EXTENSION, MAX_PIPELINED, Refused

TASK_NAME = "http-request"


class ServerState:
    """What the connections of one server share: the app, limits, the live connections, the date."""

    def __init__(self, app, *, keep_alive_timeout: float, header_timeout: float, max_header_bytes: int,
                 body_timeout: float = 30.0, body_min_rate: float = 1024.0, body_deadline: float = 300.0,
                 max_headers: int = 100, share=None):
        self.app = app
        self.keep_alive_timeout = keep_alive_timeout
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout  # the longest pause in a request body
        # A body must arrive within body_timeout + 1 s per body_min_rate bytes, and within body_deadline
        # at the latest (0 turns either off): a client trickling a byte just inside every body_timeout
        # would otherwise hold its connection (and its request) for ever.
        self.body_min_rate = body_min_rate
        self.body_deadline = body_deadline or float("inf")
        self.max_header_bytes = max_header_bytes
        self.max_headers = max_headers
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
                 "write_paused", "drain_waiter", "closed", "shed", "expect_continue", "read_at", "default_tasks",
                 "body_bytes", "paused_at", "refusal")

    def __init__(self, state: ServerState, loop: asyncio.AbstractEventLoop):
        self.state, self.loop = state, loop
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set by connection_made, before any use
        self.parser = httptools.HttpRequestParser(self)
        self.server_addr = self.client_addr = None
        self.current: Cycle | None = None  # the request being answered
        self.parsing: Cycle | None = None  # the request whose body is arriving (may be a queued one)
        self.queued: collections.deque[Cycle] = collections.deque()  # pipelined, not started yet
        self.url = b""
        self.headers: list = []
        self.header_bytes = 0
        self.parse_started = 0.0  # when the request now being parsed (head, then body) began; 0 between requests
        self.idle_since = self.read_at = 0.0
        self.read_paused = self.write_paused = self.closed = self.shed = False
        self.drain_waiter: asyncio.Future | None = None
        self.expect_continue = False  # the request being parsed sent `Expect: 100-continue`
        self.paused_at = 0.0  # when reading last paused
        self.body_bytes = 0  # of the request being parsed, so far
        self.refusal: bytes | None = None  # the answer to write once the requests before a fault are answered
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
        except httptools.HttpParserError as error:  # also what a callback raised: its Refused is the context
            refused = error.__context__
            self.refuse(refused if isinstance(refused, Refused) else wire.malformed(str(error)))

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
        self.url, self.headers, self.header_bytes, self.expect_continue, self.body_bytes = b"", [], 0, False, 0
        self.parse_started = self.state.now  # until the message is complete: its head's and body's clock

    def on_url(self, url: bytes) -> None:
        self.url += url
        self.header_bytes += len(url)
        if self.header_bytes > self.state.max_header_bytes:
            raise Refused(*wire.URL_TOO_LONG)

    def on_header(self, name: bytes, value: bytes) -> None:
        """A header field, or after the head a trailer field (counted, not kept: RFC 9110 6.5.1)."""
        self.header_bytes += len(name) + len(value) + 4
        if self.header_bytes > self.state.max_header_bytes:
            raise Refused(*wire.HEADERS_TOO_LARGE)
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        version = parser.get_http_version()
        keep_alive = parser.should_keep_alive()
        if version != "1.1" or len(self.headers) > self.state.max_headers:
            self._check_head(version)
            # HTTP/1.0 (what passed the check): closed after its answer, as uvicorn does; keeping it open
            # would need a `Connection: keep-alive` on the answer, or the client never reuses it.
            keep_alive = False
        url = self.url
        if url[:1] == b"/" and url.find(b"#") < 0:  # origin form, as good as always: no URL parser needed
            raw_path, _, query = url.partition(b"?")
        else:
            parsed = httptools.parse_url(url)
            raw_path, query = parsed.path, parsed.query or b""
        path = raw_path.decode("ascii")
        if raw_path.find(b"%") >= 0:
            path = unquote(path)
        scope: dict[str, Any] = {"type": "http", "asgi": ASGI, "http_version": version,
                 "method": _method(parser.get_method()), "scheme": "http", "path": path,
                 "raw_path": raw_path, "query_string": query, "root_path": "",
                 "headers": self.headers, "server": self.server_addr, "client": self.client_addr}
        if keep_alive and self.state.share is not None and not self.shed and self.state.share.should_shed():
            self.shed, keep_alive = True, False  # answered in full, then closed: the client reconnects
        cycle = Cycle(self, scope, keep_alive)
        scope["extensions"] = {DISCONNECT_EXTENSION: cycle.on_disconnect}
        self.parsing = cycle
        self.headers = _TRAILERS  # trailer fields after a chunked body are not the request's headers
        if self.current is None:
            self._start(cycle)
        else:
            self.queued.append(cycle)
            if len(self.queued) >= MAX_PIPELINED:
                self._pause_reading()

    def on_body(self, body: bytes) -> None:
        cycle = self.parsing
        if cycle is not None:
            self.body_bytes += len(body)
            cycle.feed(body)

    def on_chunk_header(self) -> None:
        """A chunk of a chunked body. Before the first one's data (no body bytes yet), the request's
        Transfer-Encoding is checked here rather than per header: only chunked bodies pay for it."""
        cycle = self.parsing
        if self.body_bytes == 0 and cycle is not None and cycle.scope is not None:
            scope = cycle.scope
            refusal = wire.transfer_coding_refusal(
                [value for name, value in scope["headers"] if name == b"transfer-encoding"], scope["http_version"])
            if refusal is not None:
                raise Refused(*refusal)

    def on_message_complete(self) -> None:
        self.parse_started = 0.0
        cycle, self.parsing = self.parsing, None
        if cycle is not None:
            cycle.finish_body()

    def _check_head(self, version: str) -> None:
        """The rare heads that need a closer look: not HTTP/1.1, or many fields."""
        if version != "1.1" and version != "1.0":
            raise Refused(*wire.VERSION_NOT_SUPPORTED)
        if len(self.headers) > self.state.max_headers:
            raise Refused(*wire.too_many_headers(self.state.max_headers))

    # Used by cycles
    def _start(self, cycle: Cycle) -> None:
        self.current = cycle
        self.state.in_flight += 1
        if self.default_tasks:  # named at once (create_task would name it "Task-<n>", then rename it)
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
        elif self.refusal is not None:  # the requests before a fault are answered: now the fault's answer
            self.transport.write(self.refusal)
            self.close()
            return
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
        """Refuse a request slow to send its head or body (408); drop an idle keep-alive connection."""
        if self.closed:
            return
        slow = self._too_slow(now)
        if slow is not None:
            self.refuse(Refused(*slow))
        elif self.current is None and not self.queued and self.parse_started == 0.0 and \
                now - self.idle_since > self.state.keep_alive_timeout:
            self.close()

    def _too_slow(self, now: float) -> tuple | None:
        """The refusal for a head or body arriving too slowly, if one is. Time with reading paused is the
        server's, not the client's: it is not counted (see _resume_reading)."""
        if self.read_paused or not self.parse_started:
            return None
        state, elapsed = self.state, now - self.parse_started
        if self.parsing is None:  # the head is arriving
            return wire.HEADERS_TIMEOUT if elapsed > state.header_timeout else None
        if now - self.read_at > state.body_timeout:
            return wire.BODY_STALLED
        allowed = state.body_deadline
        if state.body_min_rate:
            allowed = min(allowed, state.body_timeout + self.body_bytes / state.body_min_rate)
        if elapsed > allowed:
            return wire.BODY_TOO_SLOW
        return None

    def refuse(self, refused: Refused) -> None:
        """Stop reading requests: those parsed whole before the fault are answered, the one it broke is
        not (its application sees a disconnect), then `refused`'s answer goes out and the connection closes.

        A broken request whose response already started cannot be answered twice: the connection just closes."""
        if self.closed or self.refusal is not None:
            return  # what arrives after a fault is not parsed
        self.parse_started = 0.0
        self.refusal = refused.response()
        broken, self.parsing = self.parsing, None
        if broken is not None and broken is not self.current:
            self.queued.remove(broken)  # parsed ahead and never started
        if broken is not None and broken is self.current and broken.started:
            self.close()
        elif self.current is None or broken is self.current:
            self.transport.write(self.refusal)
            self.close()

    def _pause_reading(self) -> None:
        if not self.read_paused and not self.closed:
            self.read_paused = True
            self.paused_at = self.state.now
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self.read_paused and not self.closed:
            self.read_paused = False
            # The clocks of the head and body being parsed stood still while the server was not reading.
            now = self.state.now
            self.read_at = now
            if self.parse_started:
                self.parse_started += now - self.paused_at
            self.transport.resume_reading()

    def _wake_drain(self) -> None:
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)


class _Discarded(list):
    """Where trailer fields go: nowhere (the request's headers were handed to the application already)."""

    def append(self, item) -> None:
        pass


_TRAILERS = _Discarded()


_METHODS = {method.encode(): method for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")}


def _method(raw: bytes) -> str:
    return _METHODS.get(raw) or raw.decode("ascii")


def _address(value):
    if isinstance(value, tuple) and len(value) >= 2:
        return value[0], value[1]
    return None
