"""A lean HTTP/1.1 client for the gateway's engine calls: asyncio protocol + httptools, keep-alive pool.

Why not aiohttp's (or httpx's) client: on the request path their request machinery (request and
response objects, cookie jars, tracing hooks, multidict headers, stream readers) cost ~0.3 ms of
CPU per call on this project's 2-core machines, the single largest item in the gateway's profile
(docs/benchmarks.md). The engines speak plain HTTP/1.1 JSON and SSE, so what is needed is small:
- one `POST`/`GET` written in one `write`, the response parsed by httptools (llhttp, C);
- keep-alive connections per engine, reused LIFO, dropped after `keepalive_seconds` idle (below
  uvicorn's 5 s, so the engine does not close one under us); a reused connection that turns out
  to be closed before any response byte is retried once on a new connection, never on another idle
  one (the engine never saw it; idle connections age together, so the next may be just as stale);
- the body read whole (`read`) or chunk by chunk (`readany`, SSE), with back-pressure: reading
  from the engine pauses while more than `HIGH_WATER` bytes wait for a slow client;
- `close()` before the response is complete closes the connection, which is how vLLM learns to
  abort a generation; after a complete response it returns the connection to the pool.
Timeouts: connecting has its own (`ConnectTimeout`); `request`/`post` take an optional deadline
for the response headers (a timer on the waiting future; on expiry the connection is closed, which
aborts the engine's work); body reads are
bounded by the caller. Every failure to talk to the engine is an `UpstreamError`.
"""
from __future__ import annotations

import asyncio
import ssl
import time
from typing import Any, Coroutine
from urllib.parse import urlsplit

import httptools

HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024
COALESCE_LIMIT = 256 * 1024  # request bodies up to this size are sent in one write with their head
MAX_ROUTES = 4096  # cached request heads (method, URL); engines come and go, so the cache is bounded


class UpstreamError(Exception):
    """The engine refused, reset or closed the connection, or sent something that is not HTTP."""


class ConnectTimeout(UpstreamError):
    """No connection within the connect timeout."""


class _Stale(UpstreamError):
    """A reused keep-alive connection was already closed: nothing reached the engine."""


class UpstreamResponse:
    """Status and content type at once; the body whole (`read`) or in chunks (`readany`)."""

    __slots__ = ("status", "content_type", "_conn", "_chunks", "_buffered", "_complete", "_error", "_waiter",
                 "_released")

    def __init__(self, conn: _Connection, status: int, content_type: bytes | None):
        self.status = status
        self.content_type = content_type
        self._conn = conn
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._complete = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future | None = None
        self._released = False

    async def read(self) -> bytes:
        """The whole body."""
        parts: list[bytes] = []
        while True:
            chunk = await self.readany()
            if not chunk:
                return parts[0] if len(parts) == 1 else b"".join(parts)
            parts.append(chunk)

    async def readany(self) -> bytes:
        """The next body bytes as they arrived; b"" once the body is complete."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._complete:
                return b""
            self._waiter = self._conn.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
        self._chunks.clear()
        self._buffered = 0
        self._conn.resume()
        return data

    @property
    def complete(self) -> bool:
        """The whole body has arrived (reading it will not wait)."""
        return self._complete and self._error is None

    def close(self) -> None:
        """Done with it: a complete response frees its connection for reuse, else it is closed."""
        if self._released:
            return
        self._released = True
        self._conn.finished(reuse=self._complete and self._error is None)

    # Called by the connection.
    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > HIGH_WATER:
            self._conn.pause()
        self._wake()

    def _end(self, error: Exception | None = None) -> None:
        if error is None:
            self._complete = True
        elif not self._complete:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class _Connection(asyncio.Protocol):
    """One keep-alive connection to one engine; one request at a time."""

    def __init__(self, pool: _Pool, loop: asyncio.AbstractEventLoop):
        self.pool = pool
        self.loop = loop
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set by connection_made, before any use
        self.parser = httptools.HttpResponseParser(self)
        self.open = False
        self.idle_since = 0.0
        self._headers_done: asyncio.Future | None = None
        self._response: UpstreamResponse | None = None
        self._content_type: bytes | None = None
        self._delimited = False  # the body has a length or is chunked (else it ends with the connection)
        self._got_bytes = False
        self._paused = False

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.open = True

    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"malformed response from the engine: {exc}"))
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self.open = False
        response = self._response
        if response is not None and not response._complete and not self._delimited:
            response._end()  # a body without length ends with the connection (HTTP/1.0 style)
            return
        if self._got_bytes or self._headers_done is None:
            self._fail(UpstreamError("the engine closed the connection"))
        else:
            self._fail(_Stale("the engine closed the connection"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self._content_type = value
        elif name in (b"content-length", b"transfer-encoding"):
            self._delimited = True

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # 1xx: a final response follows
            return
        self._response = UpstreamResponse(self, status, self._content_type)
        if self._headers_done is not None and not self._headers_done.done():
            self._headers_done.set_result(self._response)

    def on_body(self, body: bytes) -> None:
        if self._response is not None:
            self._response._feed(body)

    def on_message_complete(self) -> None:
        if self._response is None:  # 1xx
            self._content_type, self._delimited = None, False
            return
        keep = self.parser.should_keep_alive()
        self._response._end()
        if not keep:
            self.open = False  # closed when released

    # Used by the pool and the response
    def send(self, message: bytes | tuple[bytes, bytes]) -> asyncio.Future:
        """Write a request (bytes, or head and a large body); the future gets the response's headers."""
        self._headers_done = self.loop.create_future()
        self._response, self._content_type, self._delimited, self._got_bytes = None, None, False, False
        if message.__class__ is tuple:  # large prompts: no copy, two writes
            self.transport.writelines(message)
        else:  # one send: writelines would make one per buffer
            self.transport.write(message)  # type: ignore[arg-type]  # bytes: the tuple went above
        return self._headers_done

    def finished(self, reuse: bool) -> None:
        self._headers_done, self._response = None, None
        if reuse and self.open:
            self.resume()
            self.pool.put(self)
        else:
            self.abort()

    def abort(self) -> None:
        self.open = False
        if self.transport is not None:
            self.transport.close()

    def pause(self) -> None:
        if not self._paused and self.open:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.open:
            self._paused = False
            self.transport.resume_reading()

    def _fail(self, error: UpstreamError) -> None:
        if self._headers_done is not None and not self._headers_done.done():
            self._headers_done.set_exception(error)
        elif self._response is not None:
            self._response._end(error)


class _Pool:
    """Idle keep-alive connections to one engine (host, port, scheme)."""

    def __init__(self, client: UpstreamClient, host: str, port: int, tls: bool):
        self.client = client
        self.host, self.port, self.tls = host, port, tls
        self.host_header = f"{host}:{port}".encode()
        self.idle: list[_Connection] = []

    def take_idle(self) -> _Connection | None:
        """The most recently used idle connection that is still fresh, if any."""
        idle = self.idle
        if not idle:
            return None
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.open and now - conn.idle_since < self.client.keepalive_seconds:
                return conn
            conn.abort()
        return None

    async def connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.client.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self, loop), self.host, self.port,
                    ssl=self.client.ssl_context() if self.tls else None)
        except TimeoutError:
            raise ConnectTimeout(f"no connection to {self.host}:{self.port} "
                                 f"within {self.client.connect_timeout:g} s") from None
        except OSError as exc:
            raise UpstreamError(f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}") from None
        return conn

    def put(self, conn: _Connection) -> None:
        if self.client.closed or len(self.idle) >= self.client.max_idle_per_engine:
            conn.abort()
            return
        conn.idle_since = time.monotonic()
        self.idle.append(conn)

    def close(self) -> None:
        while self.idle:
            self.idle.pop().abort()


class UpstreamClient:
    """One per gateway process: keep-alive pools per engine, shared by every request."""

    def __init__(self, *, connect_timeout: float, keepalive_seconds: float = 4.0, max_idle_per_engine: int = 256):
        self.connect_timeout = connect_timeout
        self.keepalive_seconds = keepalive_seconds
        self.max_idle_per_engine = max_idle_per_engine
        self.closed = False
        self._pools: dict[str, _Pool] = {}
        self._routes: dict[tuple[bytes, str], tuple[_Pool, bytes]] = {}
        self._ssl: ssl.SSLContext | None = None

    def post(self, url: str, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = (),
             timeout: float | None = None) -> Coroutine[Any, Any, UpstreamResponse]:
        """Send a POST and wait for the response's status and headers (the body follows).

        With `timeout` (seconds), raises TimeoutError when the headers have not arrived by then.
        (`request`'s coroutine itself, to be awaited: no coroutine of its own to pass each resumption through.)"""
        return self.request(b"POST", url, body, headers, timeout)

    def get(self, url: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Coroutine[Any, Any, UpstreamResponse]:
        return self.request(b"GET", url, b"", headers)

    async def request(self, method: bytes, url: str, body: bytes, headers,
                      timeout: float | None = None) -> UpstreamResponse:
        if self.closed:
            raise UpstreamError("the gateway is shutting down")
        deadline = None
        pool, start = self._route(method, url)
        parts = [start]
        for name, value in headers:
            parts += (name, b": ", value, b"\r\n")
        parts.append(b"content-length: %d\r\n\r\n" % len(body))
        if len(body) > COALESCE_LIMIT:
            message: bytes | tuple[bytes, bytes] = (b"".join(parts), body)
        else:
            parts.append(body)
            message = b"".join(parts)
        for attempt in (1, 2):
            # The retry after a stale connection opens a new one: the other idle ones went idle about as
            # long ago, so on a loaded host the engine may have closed them too.
            conn = pool.take_idle() if attempt == 1 else None
            reused = conn is not None
            # An idle connection knows its loop.
            loop = conn.loop if reused else asyncio.get_running_loop()  # type: ignore[union-attr]  # reused: idle one
            if timeout is not None and deadline is None:
                deadline = loop.time() + timeout
            if conn is None and deadline is None:
                conn = await pool.connect()
            elif conn is None:
                # Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that lands as the connection
                # is made (the request went on after its client left, or after it was superseded).
                async with asyncio.timeout_at(deadline):
                    conn = await pool.connect()
            started = conn.send(message)
            timer = None if deadline is None else loop.call_at(deadline, _expire, started)
            try:
                return await started
            except _Stale:
                if reused and attempt == 1:
                    continue  # the engine had closed it while idle; it never saw this request
                raise UpstreamError("the engine closed the connection") from None
            except BaseException:  # a timeout or cancellation: the engine must stop too
                conn.abort()
                raise
            finally:
                if timer is not None:
                    timer.cancel()
        raise AssertionError("unreachable")

    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    def _route(self, method: bytes, url: str) -> tuple[_Pool, bytes]:
        """The engine's pool and the request head up to its content-length, cached per URL."""
        found = self._routes.get((method, url))
        if found is None:
            if len(self._routes) >= MAX_ROUTES:
                self._routes.clear()
            pool, path = self._pool_for(url)
            found = self._routes[(method, url)] = (
                pool, b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method, path, pool.host_header))
        return found

    def _pool_for(self, url: str) -> tuple[_Pool, bytes]:
        base, _, rest = url.partition("://")
        origin = base + "://" + rest.split("/", 1)[0]
        pool = self._pools.get(origin)
        if pool is None:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise UpstreamError(f"unsupported engine URL {origin!r}")
            tls = parts.scheme == "https"
            pool = self._pools[origin] = _Pool(self, parts.hostname, parts.port or (443 if tls else 80), tls)
        return pool, (url[len(origin):] or "/").encode()

    async def close(self) -> None:
        self.closed = True
        for pool in self._pools.values():
            pool.close()


def _expire(started: asyncio.Future) -> None:
    if not started.done():
        started.set_exception(TimeoutError())
