"""A lean Redis client for the request path: one pipelined connection, commands sent in call order.

Why not redis-py's asyncio client there: per command it checks a connection out of a pool (an
`asyncio.Condition` with the blocking pool), encodes every argument through several layers and
parses the reply line by line through a `StreamReader` — about 100 µs of Python for a limiter
script with ~40 arguments, twice per request, which was the largest share of the gateway's own
time. This client encodes a command in one pass, queues it without awaiting anything, and writes
everything queued in one `write` per event-loop iteration; replies are matched to callers in
order, because Redis answers one connection's commands in the order it read them. Concurrent
requests therefore share one connection, and their commands leave together.

That ordering is also what lets the gateway settle a reservation without waiting for the reply
(`send_quiet()`: no future at all, only a callback should it fail): a settle queued before a
later admission of this process is run by Redis before it. redis-py stays the client for
everything off the request path and in tests.

Failure behaviour matches `gateway.limits.admission.make_client`: no retries, a short connect timeout,
errors raised as redis-py's exception classes (callers already handle `RedisError`). Callers bound
their own waits, with `asyncio.timeout` or, cheaper, a deadline passed to `send_packed` (one timer
per client, not one per command); a connection that has not answered for `stale_after` seconds
is dropped and every command on it fails, so a hung Redis cannot pile up waiters.
"""
from __future__ import annotations

import asyncio
import functools
import math
import re
import socket
import ssl
import time
from collections import deque
from urllib.parse import parse_qsl, unquote, urlsplit

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

CRLF = b"\r\n"
# URL query parameters, by redis-py's names (one URL serves every client of the install).
TLS_PARAMETERS = ("ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname")
CERT_REQS = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}


def tls_context(query: dict) -> ssl.SSLContext:
    """The TLS context of a `rediss://` URL's parameters: the server's certificate and name are
    checked (against ssl_ca_certs / ssl_ca_path, else the system's CAs) unless they say otherwise;
    ssl_certfile + ssl_keyfile present a client certificate (Redis's `tls-auth-clients`)."""
    reqs = query.get("ssl_cert_reqs", "required").lower().removeprefix("cert_")
    if reqs not in CERT_REQS:
        raise ValueError(f"ssl_cert_reqs must be one of {', '.join(CERT_REQS)}, not {reqs!r}")
    context = ssl.create_default_context(cafile=query.get("ssl_ca_certs"), capath=query.get("ssl_ca_path"))
    context.check_hostname = CERT_REQS[reqs] != ssl.CERT_NONE and \
        query.get("ssl_check_hostname", "true").lower() not in ("false", "0", "no", "off")
    context.verify_mode = CERT_REQS[reqs]
    if query.get("ssl_certfile"):
        context.load_cert_chain(query["ssl_certfile"], query.get("ssl_keyfile"))
    return context


def encode_args(args) -> bytes:
    """Arguments as RESP bulk strings (str, bytes, int and float), without the array header."""
    out = []
    for arg in args:
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, int):  # bool is an int too: no caller sends one
            arg = b"%d" % arg
        elif isinstance(arg, float):
            arg = repr(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


def encode_command(args: tuple) -> bytes:
    """One command in RESP: an array of bulk strings."""
    return b"*%d\r\n%s" % (len(args), encode_args(args))


@functools.lru_cache(maxsize=64)
def _integers(count: int) -> re.Pattern:
    """Matches `count` RESP integers in a row."""
    return re.compile(rb"(?::-?[0-9]+\r\n){%d}" % count)


class _Incomplete(Exception):
    """The buffer ends inside a reply: wait for more bytes."""


def parse_reply(buf: bytearray, pos: int):
    """(reply, next position) of the RESP2 reply starting at `pos`; errors come back as ResponseError."""
    end = buf.find(CRLF, pos)
    if end < 0:
        raise _Incomplete
    kind, line, pos = buf[pos], buf[pos + 1:end], end + 2
    if kind == 36:  # $ bulk string
        size = int(line)
        if size < 0:
            return None, pos
        if len(buf) < pos + size + 2:
            raise _Incomplete
        return bytes(buf[pos:pos + size]), pos + size + 2
    if kind == 58:  # : integer
        return int(line), pos
    if kind == 42:  # * array
        size = int(line)
        if size < 0:
            return None, pos
        whole = _integers(size).match(buf, pos) if size else None
        if whole is not None:  # integers only (the limiter's answers): one match and a split
            end = whole.end()
            return list(map(int, buf[pos + 1:end - 2].split(b"\r\n:"))), end
        items = []
        for _ in range(size):
            if buf[pos:pos + 1] == b":":  # integers inline: the limiter's answers are arrays of them
                end = buf.find(CRLF, pos)
                if end < 0:
                    raise _Incomplete
                items.append(int(buf[pos + 1:end]))
                pos = end + 2
            else:
                item, pos = parse_reply(buf, pos)
                items.append(item)
        return items, pos
    if kind == 43:  # + simple string
        return bytes(line), pos
    if kind == 45:  # - error
        message = line.decode(errors="replace")
        return (NoScriptError if message.startswith("NOSCRIPT") else ResponseError)(message), pos
    raise RedisConnectionError(f"unexpected Redis reply type {chr(kind)!r}")


class _Delivery:
    """The waiter of a `send_later` command: told its reply or its failure."""

    __slots__ = ("deliver",)

    def __init__(self, deliver):
        self.deliver = deliver


class _Protocol(asyncio.Protocol):
    """Feeds replies to its owner while it is the owner's current connection (`live`)."""

    def __init__(self, owner: "PipelinedRedis"):
        self._owner = owner
        self._buf = bytearray()
        self.live = True

    def connection_made(self, transport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:  # tiny commands: no Nagle delay
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if not self.live:
            return
        buf = self._buf
        buf += data
        consumed = 0
        try:
            while consumed < len(buf):
                reply, consumed = parse_reply(buf, consumed)
                self._owner._reply(reply)
        except _Incomplete:
            pass  # `consumed` still marks the end of the last whole reply
        except (RedisConnectionError, ValueError) as error:
            self._owner._drop(RedisConnectionError(f"bad reply from Redis: {error}"))
            return
        del buf[:consumed]

    def connection_lost(self, exc) -> None:
        if self.live:
            self._owner._drop(RedisConnectionError(f"Redis connection lost: {exc or 'closed'}"))


class PipelinedRedis:
    """The commands the gateway's request path needs, over one pipelined connection."""

    def __init__(self, host: str = "127.0.0.1", port: int = 6379, db: int = 0, *, username: str | None = None,
                 password: str | None = None, connect_timeout: float = 0.2, stale_after: float = 1.0,
                 retry_connect_after: float = 0.1, tls: ssl.SSLContext | None = None):
        self._address = (host, port)
        self._tls = tls
        self._handshake = ([("AUTH", *([username] if username else []), password)] if password else []) + \
            ([("SELECT", db)] if db else [])
        self._connect_timeout = connect_timeout
        self._stale_after = stale_after
        self._retry_connect_after = retry_connect_after
        self._transport: asyncio.Transport | None = None
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Task | None = None
        self._pending: deque = deque()  # futures (or quiet sends' error callbacks): sent or queued, oldest first
        self._deadlines: deque[tuple[float, asyncio.Future]] = deque()  # of `send_packed(..., deadline)`
        self._watchdog: asyncio.TimerHandle | None = None
        self._watch_at = math.inf
        self._out: list = []  # queued, not yet written: bytes, or a builder of them (`send_quiet_later`)
        self._later = False  # `_out` holds a `send_quiet_later` builder
        self._flush_scheduled = False
        self._last_progress = 0.0  # when the oldest pending command was sent or last answered
        self._down_until = 0.0  # after a failed connect, fail at once for a moment (no connect storm)
        self._closed = False

    @classmethod
    def from_url(cls, url: str, timeout_seconds: float = 0.2, **options) -> "PipelinedRedis":
        """`redis://` or `rediss://` (TLS) `[[user]:password@]host[:port][/db][?parameters]`.

        Parameters: `db`, and for rediss:// the TLS ones (TLS_PARAMETERS, as redis-py names them).
        A single Redis node only: no Sentinel, no Cluster (docs/gateway.md)."""
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError(f"only redis:// and rediss:// URLs are supported here, not {parts.scheme!r}")
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        unknown = sorted(set(query) - {"db", *TLS_PARAMETERS})
        if unknown or (parts.scheme == "redis" and set(query) & set(TLS_PARAMETERS)):
            raise ValueError(f"unsupported Redis URL parameters {unknown or sorted(query)}: the gateway takes db, "
                             f"and with rediss:// {', '.join(TLS_PARAMETERS)}")
        db = parts.path.strip("/") or query.get("db")
        return cls(parts.hostname or "127.0.0.1", parts.port or 6379, int(db) if db else 0,
                   username=unquote(parts.username) if parts.username else None,
                   password=unquote(parts.password) if parts.password else None,
                   connect_timeout=timeout_seconds, tls=tls_context(query) if parts.scheme == "rediss" else None,
                   **options)

    def send(self, *args) -> asyncio.Future:
        """Queue one command and return the future of its reply; never waits.

        Error replies resolve the future with the matching redis-py exception.
        """
        return self.send_packed(encode_command(args))

    def send_packed(self, command: bytes, deadline: float | None = None) -> asyncio.Future:
        """`send` for a command already encoded in RESP (callers that cache most of it).

        With a `deadline` (the event loop's clock) the future fails with TimeoutError then, if
        Redis has not answered: one timer per client instead of an `asyncio.timeout` per call.
        """
        future = asyncio.get_running_loop().create_future()
        if self._unreachable():
            future.set_exception(RedisConnectionError("Redis is unreachable"))
            return future
        self._queue(command, future)
        if deadline is not None:
            self.expire_at(future, deadline)
        return future

    def expire_at(self, future: asyncio.Future, deadline: float) -> None:
        """Fail `future` with TimeoutError at `deadline` (the event loop's clock) if still pending then."""
        self._deadlines.append((deadline, future))
        if deadline < self._watch_at:
            self._watch(deadline)

    def send_quiet(self, command: bytes, on_error=None) -> None:
        """Queue a command whose reply nobody awaits (no future); `on_error(error)` hears of a failure.

        The command keeps its place in this connection's order like any other. A failure to
        connect or a lost connection is reported too (as RedisConnectionError).
        """
        if self._unreachable():
            if on_error is not None:
                on_error(RedisConnectionError("Redis is unreachable"))
            return
        self._queue(command, on_error)

    def send_quiet_later(self, build, on_error=None) -> None:
        """`send_quiet` of a command `build()` makes when this iteration's commands are written.

        The command takes its place in the order now; callers gather into it what arrives
        until then (like several settles in one script call).
        """
        if self._unreachable():
            if on_error is not None:
                on_error(RedisConnectionError("Redis is unreachable"))
            return
        self._later = True
        self._queue(build, on_error)

    def send_later(self, build, deliver) -> None:
        """`send_quiet_later` whose every outcome goes to `deliver(reply)`: the reply, or the error.

        For callers that answer several waiters from one command (admissions sent together).
        """
        if self._unreachable():
            deliver(RedisConnectionError("Redis is unreachable"))
            return
        self._later = True
        self._queue(build, _Delivery(deliver))

    def _unreachable(self) -> bool:
        """Closed, or a connect failed a moment ago: new commands fail at once."""
        return self._closed or time.monotonic() < self._down_until

    def _queue(self, command: bytes, waiter) -> None:
        now = time.monotonic()
        if not self._pending:
            self._last_progress = now
        elif now - self._last_progress > self._stale_after:
            self._drop(RedisConnectionError("Redis stopped answering"))
            self._last_progress = now
        self._pending.append(waiter)
        self._out.append(command)
        if self._transport is None:
            if self._connecting is None:
                self._connecting = asyncio.ensure_future(self._connect())
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _watch(self, when: float) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watch_at = when
        self._watchdog = asyncio.get_running_loop().call_at(when, self._expire)

    def _expire(self) -> None:
        """Fail the commands past their deadline; wait for the next one (rarely more than one timer a deadline)."""
        self._watchdog, self._watch_at = None, math.inf
        now = asyncio.get_running_loop().time()
        waiting: deque = deque()
        soonest = math.inf
        for deadline, future in self._deadlines:
            if future.done():
                continue
            if deadline <= now:
                future.set_exception(TimeoutError("Redis did not answer in time"))
            else:
                waiting.append((deadline, future))
                soonest = min(soonest, deadline)
        self._deadlines = waiting
        if waiting:
            self._watch(soonest)

    async def execute(self, *args):
        """Send one command and wait for its reply."""
        return await self.send(*args)

    async def evalsha(self, sha: str, numkeys: int, *keys_and_args):
        return await self.send("EVALSHA", sha, numkeys, *keys_and_args)

    async def script_load(self, script: str) -> str:
        return (await self.send("SCRIPT", "LOAD", script)).decode()

    async def get(self, key: str) -> bytes | None:
        return await self.send("GET", key)

    async def set(self, key: str, value: bytes, px: int | None = None) -> bool:
        reply = await self.send("SET", key, value, *(("PX", px) if px else ()))
        return reply == b"OK"

    async def ping(self) -> bool:
        return await self.send("PING") == b"PONG"

    async def aclose(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog, self._watch_at = None, math.inf
        self._drop(RedisConnectionError("client closed"))

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._transport is not None and self._out:
            if self._later:
                self._later = False
                self._out[:] = [part if type(part) is bytes else part() for part in self._out]
            data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
            self._out.clear()
            self._transport.write(data)

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                transport, protocol = await loop.create_connection(
                    lambda: _Protocol(self), *self._address, ssl=self._tls,
                    server_hostname=self._address[0] if self._tls is not None else None)
        except (OSError, TimeoutError) as error:
            self._down_until = time.monotonic() + self._retry_connect_after
            self._drop(RedisConnectionError(f"cannot connect to Redis at {self._address}: {error!r}"))
            return
        finally:
            self._connecting = None
        if self._closed:
            transport.close()
            return
        # The handshake goes first; queued commands were never written, so they follow it in order.
        handshake = [loop.create_future() for _ in self._handshake]
        for future in handshake:
            future.add_done_callback(functools.partial(self._check_handshake, protocol))
        self._pending.extendleft(reversed(handshake))
        self._out[:0] = [encode_command(command) for command in self._handshake]
        self._transport, self._protocol = transport, protocol
        self._last_progress = time.monotonic()
        self._flush()

    def _check_handshake(self, protocol: _Protocol, future: asyncio.Future) -> None:
        error = None if future.cancelled() else future.exception()
        if error is not None and protocol.live:  # wrong password or db: everything queued fails
            self._drop(RedisConnectionError(f"Redis refused the connection set-up: {error}"))

    def _reply(self, reply) -> None:
        self._last_progress = time.monotonic()
        waiter = self._pending.popleft()
        if not isinstance(waiter, asyncio.Future):  # a quiet send: only an error is told, if anyone listens
            if type(waiter) is _Delivery:  # `send_later`: every reply is told
                waiter.deliver(reply)
            elif waiter is not None and isinstance(reply, ResponseError):
                waiter(reply)
            return
        if waiter.done():  # the caller stopped waiting (timeout, cancellation)
            return
        if isinstance(reply, ResponseError):
            waiter.set_exception(reply)
        else:
            waiter.set_result(reply)

    def _drop(self, error: Exception) -> None:
        """Close the connection and fail every command in flight or queued; `send` connects again."""
        transport, self._transport = self._transport, None
        if self._protocol is not None:
            self._protocol.live = False  # its late replies and its close belong to nobody now
            self._protocol = None
        if transport is not None:
            transport.abort()
        self._out.clear()
        pending, self._pending = self._pending, deque()
        for waiter in pending:
            if not isinstance(waiter, asyncio.Future):
                if type(waiter) is _Delivery:
                    waiter.deliver(error)
                elif waiter is not None:
                    waiter(error)
            elif not waiter.done():
                waiter.set_exception(error)
                waiter.exception()  # retrieved: fire-and-forget callers may never look
