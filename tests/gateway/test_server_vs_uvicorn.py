"""The gateway's HTTP server beside uvicorn 0.54 (httptools and h11), case by case, over raw loopback sockets.

Each row of CASES sends the same bytes to the three servers (same ASGI app) and states what each
answers: the statuses in order, then whether the connection was closed ("close") or left open
("open"). Where ours differs on purpose, `why` says why; docs/gateway.md has the table in prose.
The test fails when any server's behaviour drifts from its column, ours included.
"""
from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import uvicorn

from tests.gateway.server_helpers import Running, echo, with_lifespan
from tests.processes import free_port

SERVERS = ("ours", "uvicorn-httptools", "uvicorn-h11")
H = b"POST /r HTTP/1.1\r\nhost: x\r\n"
GET = b"GET /g HTTP/1.1\r\nhost: x\r\n\r\n"


def posted(body: bytes) -> bytes:
    return H + b"content-length: %d\r\n\r\n%s" % (len(body), body)


@dataclass(frozen=True)
class Case:
    name: str
    script: tuple  # bytes, or (seconds to wait first, bytes) steps
    ours: str
    httptools: str
    h11: str
    why: str = ""  # where ours differs from uvicorn on purpose

    def expected(self, server: str) -> str:
        return {"ours": self.ours, "uvicorn-httptools": self.httptools, "uvicorn-h11": self.h11}[server]


TE = H + b"transfer-encoding: "
CASES = [
    # Request bodies: framing, transfer codings, chunks.
    Case("a chunked body", (TE + b"chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",), "200 open", "200 open", "200 open"),
    Case("TE: xchunked", (TE + b"xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",), "400 close", "400 close", "400 close"),
    Case("TE: chunked, gzip", (TE + b"chunked, gzip\r\n\r\n5\r\nhello\r\n0\r\n\r\n",),
         "400 close", "400 close", "400 close"),
    Case("TE: gzip", (TE + b"gzip\r\n\r\nhello",), "400 close", "400 close", "400 close"),
    Case("TE: gzip, chunked", (TE + b"gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",),
         "501 close", "200 open", "400 close",
         "uvicorn(httptools) hands the application still-gzipped bytes as the body; a coding the server does "
         "not implement is a 501 (RFC 9112 6.1)"),
    Case("TE: gzip and TE: chunked", (H + b"transfer-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n"
                                      b"5\r\nhello\r\n0\r\n\r\n",),
         "501 close", "200 open", "400 close", "as above: the two fields are one list, gzip then chunked"),
    Case("TE: chunked twice", (H + b"transfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",),
         "400 close", "400 close", "400 close"),
    Case("TE in HTTP/1.0", (b"POST /r HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",),
         "400 close", "200 close", "200 close",
         "HTTP/1.0 has no transfer codings: RFC 9112 6.1 calls such framing faulty (a smuggling vector behind "
         "a proxy that reads it as HTTP/1.0 does)"),
    Case("TE and Content-Length (smuggling)", (TE + b"chunked\r\ncontent-length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",),
         "400 close", "400 close", "200 open"),
    Case("Content-Length: -1", (H + b"content-length: -1\r\n\r\n",), "400 close", "400 close", "400 close"),
    Case("Content-Length twice, same value", (H + b"content-length: 5\r\ncontent-length: 5\r\n\r\nhello",),
         "400 close", "400 close", "200 open"),
    Case("Content-Length twice, different values", (H + b"content-length: 5\r\ncontent-length: 6\r\n\r\nhello!",),
         "400 close", "400 close", "400 close"),
    Case("Content-Length: 5, 5", (H + b"content-length: 5, 5\r\n\r\nhello",), "400 close", "400 close", "200 open"),
    Case("Content-Length: +5", (H + b"content-length: +5\r\n\r\nhello",), "400 close", "400 close", "400 close"),
    Case("Content-Length: 0x5", (H + b"content-length: 0x5\r\n\r\nhello",), "400 close", "400 close", "400 close"),
    Case("Content-Length past 2**64", (H + b"content-length: 99999999999999999999999\r\n\r\n",),
         "400 close", "400 close", "400 close"),
    Case("chunk size not hex", (TE + b"chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",), "400 close", "400 close",
         "400 close"),
    Case("chunk longer than its size", (TE + b"chunked\r\n\r\n5\r\nhelloXX\r\n0\r\n\r\n",),
         "400 close", "400 close", "400 close"),
    Case("chunk size past 2**64", (TE + b"chunked\r\n\r\nffffffffffffffffff\r\nhello\r\n0\r\n\r\n",),
         "400 close", "400 close", "open"),
    Case("bad chunk after the application started", (TE + b"chunked\r\n\r\n5\r\nhello\r\n", (0.2, b"zz\r\n")),
         "400 close", "400 close", "400 close"),
    Case("chunk extensions", (TE + b"chunked\r\n\r\n5;name=value;q=\"x\"\r\nhello\r\n0\r\n\r\n",),
         "200 open", "200 open", "200 open"),
    Case("trailer fields", (TE + b"chunked\r\n\r\n5\r\nhello\r\n0\r\nx-trailer: 1\r\n\r\n",),
         "200 open", "200 open", "200 open"),
    Case("a request, then garbage, one packet", (posted(b"hello") + b"GARBAGE\x01\r\n\r\n",),
         "200 400 close", "400 close", "200 400 close",
         "the request before the garbage is answered first, as h11 does; uvicorn(httptools) writes its 400 at "
         "once and that answer is lost"),
    Case("three pipelined requests", (posted(b"a") + posted(b"b") + posted(b"c"),), "200 200 200 open",
         "200 200 200 open", "200 200 200 open"),
    Case("two pipelined requests, then garbage", (posted(b"a") + posted(b"b") + b"\x00\x01\r\n\r\n",),
         "200 200 400 close", "400 close", "200 200 400 close", "as above"),
    Case("Expect: 100-continue", (H + b"content-length: 5\r\nexpect: 100-continue\r\n\r\n", (0.2, b"hello")),
         "100 200 open", "100 200 open", "100 200 open"),
    # Request line and header fields.
    Case("HTTP/1.0", (b"GET /g HTTP/1.0\r\n\r\n",), "200 close", "200 close", "200 close"),
    Case("HTTP/1.0 keep-alive", (b"GET /g HTTP/1.0\r\nconnection: keep-alive\r\n\r\n",),
         "200 close", "200 close", "200 close"),
    Case("HTTP/1.1 without Host", (b"GET /g HTTP/1.1\r\n\r\n",), "200 open", "200 open", "400 close",
         "accepted, as uvicorn(httptools) does, though RFC 9112 3.2 says 400: the gateway reads no Host (no "
         "virtual hosts), and counting Host fields costs every request a compare per header"),
    Case("two Host fields", (b"GET /g HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n",), "200 open", "200 open",
         "400 close", "as above"),
    Case("obs-fold (a folded header line)", (b"GET /g HTTP/1.1\r\nhost: x\r\nx-a: 1\r\n  2\r\n\r\n",),
         "400 close", "400 close", "200 open"),
    Case("NUL in a header value", (b"GET /g HTTP/1.1\r\nhost: x\r\nx-a: 1\x002\r\n\r\n",),
         "400 close", "400 close", "400 close"),
    Case("CR in a header value", (b"GET /g HTTP/1.1\r\nhost: x\r\nx-a: 1\r2\r\n\r\n",),
         "400 close", "400 close", "400 close"),
    Case("bare LF line ends", (b"GET /g HTTP/1.1\nhost: x\n\n",), "400 close", "400 close", "200 open"),
    Case("space before the colon", (b"GET /g HTTP/1.1\r\nhost : x\r\n\r\n",), "400 close", "400 close",
         "400 close"),
    Case("101 header fields", (b"GET /g HTTP/1.1\r\nhost: x\r\n" + b"".join(b"x-%d: 1\r\n" % n for n in range(100))
                               + b"\r\n",),
         "431 close", "200 open", "200 open",
         "a bounded field count (100, as Apache's default) keeps a 64 KiB head of tiny fields from reaching "
         "the application as thousands of headers"),
    Case("a 70 KiB header", (b"GET /g HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 70_000 + b"\r\n\r\n",),
         "431 close", "200 open", "200 open", "the head is bounded (64 KiB); uvicorn has no such bound"),
    Case("a 70 KiB URL", (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nhost: x\r\n\r\n",),
         "414 close", "400 close", "200 open", "the status that names the fault"),
    Case("absolute-form URL", (b"GET http://x/g?q=1 HTTP/1.1\r\nhost: x\r\n\r\n",), "200 open", "200 open",
         "200 open"),
    Case("leading blank line", (b"\r\n" + GET,), "200 open", "200 open", "400 close"),
    Case("unknown method FOO", (b"FOO /g HTTP/1.1\r\nhost: x\r\n\r\n",), "400 close", "400 close", "200 open"),
    Case("WebDAV method PROPFIND", (b"PROPFIND /g HTTP/1.1\r\nhost: x\r\n\r\n",), "200 open", "200 open",
         "200 open"),
    Case("CONNECT", (b"CONNECT x:443 HTTP/1.1\r\nhost: x:443\r\n\r\n",), "400 close", "400 close", "200 close"),
    Case("HTTP/2 preface", (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",), "505 close", "400 close", "200 400 close",
         "an h2c client is told the version is not served (505), not that its bytes are malformed"),
    Case("HTTP/2.0 request line", (b"GET /g HTTP/2.0\r\nhost: x\r\n\r\n",), "505 close", "200 close", "200 open",
         "an HTTP/1.1 answer to an HTTP/2.0 request would be a lie: 505"),
    Case("HTTP/1.2", (b"GET /g HTTP/1.2\r\nhost: x\r\n\r\n",), "400 close", "400 close", "200 open"),
    Case("Upgrade: h2c", (b"GET /g HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n",),
         "200 close", "200 open", "200 open",
         "served as HTTP/1.1; llhttp stops parsing after an Upgrade request, so the connection closes after it"),
]


@dataclass(frozen=True)
class TimedCase:
    name: str
    script: tuple
    ours: str
    uvicorn: str
    why: str


TIMED_CASES = [
    TimedCase("a connection that sends nothing", (), "close", "open",
              "an idle connection is closed after the keep-alive timeout from its start; uvicorn waits for ever"),
    TimedCase("a head that never ends", (b"GET /g HTTP/1.1\r\nhost: x\r\n",), "408 close", "open",
              "slow-loris: the head must arrive within the header timeout (10 s); uvicorn has no such limit"),
    TimedCase("a body that stops", (H + b"content-length: 10\r\n\r\nab",), "408 close", "open",
              "a body may pause at most the body timeout; uvicorn has no body timeout"),
    TimedCase("a body trickling in, a byte every 0.3 s", (H + b"content-length: 100\r\n\r\n",
                                                         *((0.3, b"x"),) * 12),
              "408 close", "open",
              "under the minimum rate the body is cut, though it never pauses for the body timeout"),
    TimedCase("keep-alive, idle after an answer", (GET,), "200 close", "200 close", ""),
]


def run_in_thread(server: uvicorn.Server) -> threading.Thread:
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    return thread


class Uvicorn:
    def __init__(self, http: str, **options):
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(with_lifespan(echo), host="127.0.0.1", port=self.port, http=http,
                                                    log_level="critical", **options))

    def __enter__(self):
        self.thread = run_in_thread(self.server)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def ports():
    with Running(echo) as ours, Uvicorn("httptools") as httptools, Uvicorn("h11") as h11:
        yield {"ours": ours.port, "uvicorn-httptools": httptools.port, "uvicorn-h11": h11.port}


@pytest.fixture(scope="module")
def timed_ports():
    """Short timeouts: ours as configured below, uvicorn's keep-alive timeout (its only one) alike."""
    with Running(echo, keep_alive_timeout=0.5, header_timeout=0.5, body_timeout=0.8, body_min_rate=10) as ours, \
            Uvicorn("httptools", timeout_keep_alive=1) as httptools, Uvicorn("h11", timeout_keep_alive=1) as h11:
        yield {"ours": ours.port, "uvicorn-httptools": httptools.port, "uvicorn-h11": h11.port}


def observe(port: int, script: tuple, watch: float, until_close: bool = False) -> str:
    """Play `script` to a fresh connection; the statuses that came back, then `close` or `open`.

    Done when the server closes, or (unless `until_close`) has sent whole responses and then nothing
    for 0.3 s; `watch` s at most after the script."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.settimeout(None)  # the reader blocks until the server closes, or the shutdown below
    received, closed, last_byte = bytearray(), threading.Event(), [time.monotonic()]

    def reader():
        try:
            while chunk := sock.recv(65536):
                received.extend(chunk)
                last_byte[0] = time.monotonic()
        except OSError:
            pass
        closed.set()

    threading.Thread(target=reader, daemon=True).start()
    for step in script:
        delay, data = step if isinstance(step, tuple) else (0, step)
        if closed.wait(delay):
            break
        try:
            sock.sendall(data)
        except OSError:
            break
    deadline = time.monotonic() + watch
    while not closed.is_set() and time.monotonic() < deadline:
        statuses, whole = responses(bytes(received))
        if not until_close and statuses and whole and time.monotonic() - last_byte[0] > 0.3:
            break
        time.sleep(0.02)
    was_closed = closed.wait(0.05)
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
    return " ".join([*responses(bytes(received))[0], "close" if was_closed else "open"])


def responses(data: bytes) -> tuple[list[str], bool]:
    """The statuses of the responses in `data`, and whether it ends where a response ends."""
    statuses = []
    while data:
        head, found, rest = data.partition(b"\r\n\r\n")
        if not found:
            return statuses, False
        lines = head.split(b"\r\n")
        statuses.append(lines[0].split()[1].decode())
        fields = {name.strip().lower(): value.strip() for name, _,
                  value in (line.partition(b":") for line in lines[1:])}
        if b"content-length" in fields:
            size = int(fields[b"content-length"])
            if len(rest) < size:
                return statuses, False
            data = rest[size:]
        elif fields.get(b"transfer-encoding") == b"chunked":
            end = rest.find(b"0\r\n\r\n")
            if end < 0:
                return statuses, False
            data = rest[end + 5:]
        else:  # 100 Continue, or a body that ends with the connection
            data = rest
            if statuses[-1] != "100":
                return statuses, True
    return statuses, True


def observe_all(ports: dict, script: tuple, **options) -> dict:
    """`observe` on the three servers at once (the waits overlap)."""
    with ThreadPoolExecutor(len(ports)) as pool:
        futures = {name: pool.submit(observe, port, script, **options) for name, port in ports.items()}
        return {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_each_case_is_answered_as_the_table_says(ports, case):
    assert observe_all(ports, case.script, watch=3) == {server: case.expected(server) for server in SERVERS}


@pytest.mark.parametrize("case", TIMED_CASES, ids=[case.name for case in TIMED_CASES])
def test_slow_and_idle_clients_are_cut_as_the_table_says(timed_ports, case):
    expected = {server: case.ours if server == "ours" else case.uvicorn for server in SERVERS}
    assert observe_all(timed_ports, case.script, watch=3, until_close=True) == expected


def test_every_difference_from_uvicorns_default_says_why():
    """uvicorn picks httptools when it is installed: a row where ours answers otherwise must say why."""
    assert [case.name for case in CASES if case.ours != case.httptools and not case.why] == []
    assert [case.name for case in TIMED_CASES if case.ours != case.uvicorn and not case.why] == []
