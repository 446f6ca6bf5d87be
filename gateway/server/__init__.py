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
- limits: request line + headers at most `max_header_bytes` (414 for the URL alone, else 431) and
  `max_headers` fields (431); a request whose headers have not arrived within `header_timeout` gets
  408 (slow-loris), so does one whose body pauses for `body_timeout`, or arrives slower than
  `body_timeout` + 1 s per `body_min_rate` bytes, or takes longer than `body_deadline` in all;
  idle keep-alive connections close after `keep_alive_timeout`; all checked by one sweep per
  second, not a timer per request;
- errors: every refusal is an OpenAI-shaped JSON error (`gateway.errors`), then the connection
  closes. Bytes that are not HTTP/1.1 get 400, and so does framing llhttp lets through but this
  server does not serve: a coding ahead of `chunked` (501, RFC 9112 6.1) and Transfer-Encoding in
  HTTP/1.0 (400); a version other than 1.0/1.1 gets 505. Requests parsed whole before the bad
  bytes are answered first, in order; the request the bad bytes belong to is not (its
  application sees a disconnect). Trailer fields are read and dropped (never merged into the
  headers). HTTP/1.0 connections close after their answer. An application error before the
  response started gets 500, after it the connection closes (the client sees a cut answer);
- `Date` on every response (cached per second); no `Server` header;
- graceful stop on SIGTERM/SIGINT: stop accepting, close idle connections, let requests in flight
  finish (up to `graceful_timeout`), then the ASGI lifespan's shutdown.

One extension beyond plain ASGI: `scope["extensions"]["switchyard.disconnect"]` is a function
that registers a callback, called once if the client disconnects before the response is
complete. An application can then stop its work without a task per request waiting on
`receive()` (both the gateway and the simulator do); `receive()` still reports the disconnect.

`share` (`connection_share.ConnectionShare`) lets a `--workers` worker keep its fair share of
connections: when it holds too many it answers the current request with `connection: close`.

A companion (`add_companion`) is a second server on the same event loop, for another app on
other sockets — the gateway's metrics listener: it starts once this server's app has started
and stops after this server's requests have finished.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time

from gateway.server.connection import HttpConnection, ServerState
from gateway.server.lifespan import Lifespan
from gateway.server.wire import DISCONNECT_EXTENSION

__all__ = ["DISCONNECT_EXTENSION", "HttpServer"]
log = logging.getLogger("gateway.server")


class HttpServer:
    """Serves one ASGI app until `should_exit`; `run()` blocks (own event loop), `serve()` is the coroutine.

    The same shape as uvicorn's `Server` where the gateway and its tests used it: `started`,
    `should_exit`, `run(sockets=...)`.
    """

    def __init__(self, app, *, host: str = "127.0.0.1", port: int = 8001, backlog: int = 4096,
                 keep_alive_timeout: float = 5.0, header_timeout: float = 10.0, body_timeout: float = 30.0,
                 body_min_rate: float = 1024.0, body_deadline: float = 300.0,
                 max_header_bytes: int = 64 * 1024, max_headers: int = 100,
                 graceful_timeout: float = 30.0, lifespan: bool = True, share=None, install_signals: bool = True):
        self.app, self.host, self.port, self.backlog = app, host, port, backlog
        self.lifespan = Lifespan(app) if lifespan else None
        self.state = ServerState(app, keep_alive_timeout=keep_alive_timeout, header_timeout=header_timeout,
                                 body_timeout=body_timeout, body_min_rate=body_min_rate, body_deadline=body_deadline,
                                 max_header_bytes=max_header_bytes, max_headers=max_headers, share=share)
        self.graceful_timeout = graceful_timeout
        self.install_signals = install_signals
        self.started = False
        self.should_exit = False
        self.failed = False
        self._companions: list[tuple[HttpServer, list[socket.socket] | None]] = []

    def add_companion(self, server: "HttpServer", sockets: list[socket.socket] | None = None) -> None:
        """Serve `server` (without lifespan or signals of its own) on this server's loop, for as long as this one."""
        self._companions.append((server, sockets))

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
        state.now = loop.time()
        companions = [self._start_companion(server, sockets) for server, sockets in self._companions]
        self.started = True
        try:
            while not self.should_exit:
                await asyncio.sleep(0.1 if state.keep_alive_timeout > 1 else 0.05)
                now = state.now = loop.time()
                if int(now) != int(now - 0.1):  # about once a second: the date and the timeouts
                    state.tick()
                    for conn in list(state.connections):
                        conn.sweep(now)
        finally:
            await self._stop(servers)
            await self._stop_companions(companions)
            if self.lifespan is not None:
                await self.lifespan.shutdown()

    def _start_companion(self, server: "HttpServer", sockets) -> asyncio.Task:
        task = asyncio.create_task(server.serve(sockets), name="http-companion")

        def ended(task: asyncio.Task) -> None:  # a companion that fails takes this server down with it
            if not task.cancelled() and task.exception() is not None and not self.should_exit:
                log.error("a companion server failed: %r", task.exception())
                self.failed = self.should_exit = True
        task.add_done_callback(ended)
        return task

    async def _stop_companions(self, tasks: list[asyncio.Task]) -> None:
        for server, _ in self._companions:
            server.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)

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
