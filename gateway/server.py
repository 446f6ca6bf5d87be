"""A lean HTTP/1.1 server for ASGI applications: httptools' parser (llhttp, C) and little else.

Why not uvicorn, which served the gateway before: per request it builds a cycle object with a
dozen fields, an `asyncio.Event` for the body, validates every response header with two regular
expressions, writes the head and the body as two sends and re-arms a keep-alive timer — about a
tenth of the gateway's CPU per request at thousands of requests per second on 2 cores, for
features the gateway does not use (WebSockets, HTTP/2 upgrades, proxy headers, access logs).
What this server does, and how:

- HTTP/1.1 and 1.0, keep-alive, pipelined requests (answered in order), chunked or sized request
  bodies, `Expect: 100-continue`, HEAD; one asyncio task per request;
- a response's head is written with its first body bytes in one `send`; a head without a body
  yet (a stream waiting for its first token) leaves at the end of the event-loop iteration;
- back-pressure both ways: reading pauses while a request body waits unread past `BODY_HIGH_WATER`,
  and `send` waits while the transport's write buffer is over its high-water mark;
- limits: request line + headers at most `max_header_bytes` (431), a request whose headers have
  not arrived within `header_timeout` is dropped (slow-loris), so is one whose body stops arriving
  for `body_timeout`, idle keep-alive connections close after `keep_alive_timeout`; all checked
  by one sweep per second, not a timer per request;
- errors: a malformed request gets 400 and the connection closes; an application error before
  the response started gets 500, after it the connection closes (the client sees a cut answer);
- `Date` on every response (cached per second); no `Server` header;
- graceful stop on SIGTERM/SIGINT: stop accepting, close idle connections, let requests in flight
  finish (up to `graceful_timeout`), then the ASGI lifespan's shutdown.

One extension beyond plain ASGI: `scope["extensions"]["switchyard.disconnect"]` is a function
that registers a callback, called once if the client disconnects before the response is
complete. An application can then stop its work without a task per request waiting on
`receive()` (both the gateway and the simulator do); `receive()` still reports the disconnect.

`share` (gateway.balance.ConnectionShare) lets a `--workers` worker keep its fair share of
connections: when it holds too many it answers the current request with `connection: close`.
"""
from __future__ import annotations

import asyncio
import collections
import email.utils
import http
import logging
import signal
import socket
import time
from urllib.parse import unquote

import httptools

log = logging.getLogger("gateway.server")

BODY_HIGH_WATER = 1 << 20  # unread request body bytes before reading pauses
MAX_PIPELINED = 16  # requests parsed ahead of the one being answered before reading pauses
ASGI = {"version": "3.0", "spec_version": "2.3"}
DISCONNECT = {"type": "http.disconnect"}
DISCONNECT_EXTENSION = "switchyard.disconnect"
STATUS_LINES = {status.value: b"HTTP/1.1 %d %s\r\n" % (status.value, status.phrase.encode())
                for status in http.HTTPStatus}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def _status_line(status: int) -> bytes:
    return STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status


def _plain_response(status: int, text: str) -> bytes:
    body = text.encode()
    return (_status_line(status) + b"content-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body))


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
        self.tick()

    def tick(self) -> None:
        self.date = b"date: " + email.utils.formatdate(usegmt=True).encode() + b"\r\n"


class HttpConnection(asyncio.Protocol):
    """One client connection: parses requests, runs them one at a time, writes their answers."""

    __slots__ = ("state", "loop", "transport", "parser", "server_addr", "client_addr", "current", "parsing",
                 "queued", "url", "headers", "header_bytes", "parse_started", "idle_since", "read_paused",
                 "write_paused", "drain_waiter", "closed", "shed", "expect_continue", "read_at")

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

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.server_addr = _address(transport.get_extra_info("sockname"))
        self.client_addr = _address(transport.get_extra_info("peername"))
        self.idle_since = self.loop.time()
        self.state.connections.add(self)
        if self.state.share is not None:
            self.state.share.opened()

    def data_received(self, data: bytes) -> None:
        self.read_at = self.loop.time()
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
        self.parse_started = self.loop.time()

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._count_header_bytes(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_header_bytes(len(name) + len(value) + 4)
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.parse_started = 0.0
        parser = self.parser
        url = httptools.parse_url(self.url)
        raw_path = url.path
        path = raw_path.decode("ascii") if b"%" not in raw_path else unquote(raw_path.decode("ascii"))
        scope = {"type": "http", "asgi": ASGI, "http_version": parser.get_http_version(),
                 "method": parser.get_method().decode("ascii"), "scheme": "http", "path": path,
                 "raw_path": raw_path, "query_string": url.query or b"", "root_path": "",
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
            self.idle_since = self.loop.time()
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
            self.transport.write(_plain_response(status, message))
        self.close()

    def _count_header_bytes(self, size: int) -> None:
        self.header_bytes += size
        if self.header_bytes > self.state.max_header_bytes:
            raise _HeadersTooLarge

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
                conn.write(_plain_response(500, "Internal Server Error"))
            conn.close()
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
        else:
            if not self.complete:  # the application returned without finishing its response
                if not self.started and not conn.closed:
                    conn.write(_plain_response(500, "Internal Server Error"))
                conn.close()
        finally:
            self.task = None
            if not self.complete or self.more_body:  # unfinished, or the request body not read to its end
                self.keep_alive = False
            conn.answered(self)

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
        parts = [_status_line(status)]
        length = None
        for name, value in headers:
            if b"\n" in value or b"\r" in value or b"\n" in name or b"\r" in name or b":" in name:
                raise RuntimeError(f"invalid response header {name!r}")
            lower = name.lower()
            if lower == b"content-length":
                length = int(value)
                continue  # written below, once
            elif lower == b"transfer-encoding":
                continue  # the server frames the body itself
            elif lower == b"connection" and b"close" in value.lower():
                self.keep_alive = False
                continue
            parts.append(b"%s: %s\r\n" % (name, value))
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
        self.head = b"".join(parts)
        # Sent with the first body bytes if they come in this event-loop iteration, else alone.
        self.conn.loop.call_soon(self._flush_head)

    def _flush_head(self) -> None:
        if self.head is not None and not self.disconnected:
            head, self.head = self.head, None
            self.conn.write(head)


def _address(value):
    if isinstance(value, tuple) and len(value) >= 2:
        return value[0], value[1]
    return None


class HttpServer:
    """Serves one ASGI app until `should_exit`; `run()` blocks (own event loop), `serve()` is the coroutine.

    The same shape as uvicorn's `Server` where the gateway and its tests used it: `started`,
    `should_exit`, `run(sockets=...)`.
    """

    def __init__(self, app, *, host: str = "127.0.0.1", port: int = 8001, backlog: int = 4096,
                 keep_alive_timeout: float = 5.0, header_timeout: float = 10.0, body_timeout: float = 30.0,
                 max_header_bytes: int = 64 * 1024,
                 graceful_timeout: float = 30.0, lifespan: bool = True, share=None, install_signals: bool = True):
        self.app, self.host, self.port, self.backlog = app, host, port, backlog
        self.lifespan = Lifespan(app) if lifespan else None
        self.state = ServerState(app, keep_alive_timeout=keep_alive_timeout, header_timeout=header_timeout,
                                 body_timeout=body_timeout,
                                 max_header_bytes=max_header_bytes, share=share)
        self.graceful_timeout = graceful_timeout
        self.install_signals = install_signals
        self.started = False
        self.should_exit = False
        self.failed = False

    def run(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            import uvloop
            factory = uvloop.new_event_loop
        except ImportError:  # pragma: no cover - uvloop is a requirement; plain asyncio still works
            factory = None
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(self.serve(sockets))
        if self.failed:
            raise SystemExit(3)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        loop = asyncio.get_running_loop()
        if self.lifespan is not None and not await self.lifespan.startup():
            self.failed = True
            return
        state = self.state

        def protocol() -> HttpConnection:
            return HttpConnection(state, loop)

        if sockets:
            servers = [await loop.create_server(protocol, sock=sock, backlog=self.backlog) for sock in sockets]
        else:
            servers = [await loop.create_server(protocol, self.host, self.port, backlog=self.backlog,
                                                reuse_address=True)]
        if self.install_signals:
            for signum in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(signum, self._exit_signal)
                except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
                    pass
        self.started = True
        try:
            while not self.should_exit:
                await asyncio.sleep(0.1 if state.keep_alive_timeout > 1 else 0.05)
                now = loop.time()
                if int(now) != int(now - 0.1):  # about once a second: the date and the timeouts
                    state.tick()
                    for conn in list(state.connections):
                        conn.sweep(now)
        finally:
            await self._stop(servers)

    def _exit_signal(self) -> None:
        if self.should_exit:  # a second signal: do not wait for requests in flight
            self.graceful_timeout = 0
        self.should_exit = True

    async def _stop(self, servers) -> None:
        for server in servers:
            server.close()
        state = self.state
        for conn in list(state.connections):  # idle keep-alive connections go at once
            if conn.current is None and not conn.queued:
                conn.close()
        deadline = time.monotonic() + self.graceful_timeout
        while state.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(state.connections):
            if conn.current is not None and conn.current.task is not None:
                conn.current.task.cancel()
            conn.close()
        await asyncio.sleep(0)
        if self.lifespan is not None:
            await self.lifespan.shutdown()


class Lifespan:
    """The ASGI lifespan protocol: startup before serving, shutdown after."""

    def __init__(self, app):
        self.app = app
        self._inbox: asyncio.Queue | None = None
        self._outbox: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None

    async def startup(self) -> bool:
        self._inbox, self._outbox = asyncio.Queue(), asyncio.Queue()
        self._task = asyncio.create_task(self._main())
        await self._inbox.put({"type": "lifespan.startup"})
        message = await self._outbox.get()
        if message["type"] == "lifespan.startup.failed":
            log.error("application start-up failed: %s", message.get("message", ""))
            return False
        return True

    async def shutdown(self) -> None:
        if self._task is None or self._task.done():
            return
        await self._inbox.put({"type": "lifespan.shutdown"})
        try:
            await asyncio.wait_for(self._outbox.get(), 60)
        except TimeoutError:
            log.error("application shutdown did not finish within 60 s")

    async def _main(self) -> None:
        scope = {"type": "lifespan", "asgi": ASGI, "state": {}}
        sent: set[str] = set()

        async def send(message: dict) -> None:
            sent.add(message["type"])
            await self._outbox.put(message)

        try:
            await self.app(scope, self._inbox.get, send)
        except BaseException as error:  # a crash in start-up or shutdown
            if isinstance(error, asyncio.CancelledError):
                raise
            log.exception("the application's lifespan failed")
            if not sent:
                await self._outbox.put({"type": "lifespan.startup.failed", "message": repr(error)})
        # An application that ignores lifespan messages (or returned early) must not hang the server.
        for kind in ("lifespan.startup.complete", "lifespan.shutdown.complete"):
            if not sent & {kind, kind.replace("complete", "failed")}:
                await self._outbox.put({"type": kind})
