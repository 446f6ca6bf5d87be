"""gateway.server refusing what it cannot serve: a clear JSON 4xx/5xx and a close, never silence or a hang;
the requests before the bad bytes still answered; slow heads and bodies cut by deadline and rate."""
import asyncio
import json
import threading
import time

import pytest

from tests.gateway.server_helpers import (
    Running,
    closed_by_server,
    echo,
    post,
    read_all,
    read_response,
    recording_reader,
    wait_for_disconnect,
)

H = b"POST /r HTTP/1.1\r\nhost: x\r\n"


@pytest.fixture(scope="module")
def echo_server():
    with Running(echo) as running:
        yield running


def refusal_of(sock, buffer=None) -> tuple[int, dict]:
    """The refusal on `sock`: its status and OpenAI-shaped error; the server must close after it."""
    status, headers, body = read_response(sock, buffer)
    assert headers[b"connection"] == [b"close"] and headers[b"content-type"] == [b"application/json"]
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert closed_by_server(sock)
    return int(status.split()[1]), error


@pytest.mark.parametrize("request_bytes, status, code", [
    (H + b"transfer-encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400, "malformed_request"),
    (H + b"transfer-encoding: chunked, gzip\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400, "malformed_request"),
    (H + b"transfer-encoding: gzip\r\n\r\nhello", 400, "malformed_request"),
    (H + b"transfer-encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 501, "unsupported_transfer_encoding"),
    (H + b"transfer-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 501,
     "unsupported_transfer_encoding"),
    (b"POST /r HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400,
     "invalid_transfer_encoding"),
    (H + b"transfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n", 400, "malformed_request"),
    (H + b"transfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400, "malformed_request"),
    (H + b"content-length: 5\r\ncontent-length: 6\r\n\r\nhello!", 400, "malformed_request"),
    (H + b"content-length: -1\r\n\r\n", 400, "malformed_request"),
    (H + b"content-length: 99999999999999999999999\r\n\r\n", 400, "malformed_request"),
    (H + b"transfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", 400, "malformed_request"),
    (H + b"transfer-encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", 400, "malformed_request"),
    (H + b"transfer-encoding: chunked\r\n\r\nffffffffffffffffff\r\nhello\r\n0\r\n\r\n", 400, "malformed_request"),
    (b"GET / HTTP/2.0\r\nhost: x\r\n\r\n", 505, "http_version_not_supported"),
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, "http_version_not_supported"),
    (b"GET / HTTP/1.1\r\nhost: x\r\nx-a: 1\r\n  folded\r\n\r\n", 400, "malformed_request"),
    (b"GET / HTTP/1.1\r\nhost: x\r\nx-a: 1\x002\r\n\r\n", 400, "malformed_request"),
    (b"GET / HTTP/1.1\r\nhost: x\r\nx-a: 1\r2\r\n\r\n", 400, "malformed_request"),
    (b"GET / HTTP/1.1\r\nhost : x\r\n\r\n", 400, "malformed_request"),
    (b"GET / HTTP/1.1\r\nhost: x\r\n" + b"".join(b"x-%d: 1\r\n" % n for n in range(101)) + b"\r\n", 431,
     "too_many_headers"),
    (b"GET / HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 70_000 + b"\r\n\r\n", 431, "headers_too_large"),
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nhost: x\r\n\r\n", 414, "url_too_long"),
])
def test_each_refusal_is_an_openai_shaped_error_and_a_close(echo_server, request_bytes, status, code):
    sock = echo_server.connect()
    sock.sendall(request_bytes)
    got_status, error = refusal_of(sock)
    assert (got_status, error["code"]) == (status, code)
    assert error["type"] == ("invalid_request_error" if status < 500 else "server_error")


def test_a_valid_request_followed_by_garbage_in_the_same_packet_gets_its_answer_then_a_400():
    with Running(echo) as running:
        sock = running.connect()
        sock.sendall(post(b"/ok", b"hello") + b"GARBAGE\x01 / HTTP/1.1\r\n\r\n")
        buffer = bytearray()
        status, _, body = read_response(sock, buffer)
        assert status == b"HTTP/1.1 200 OK" and body == b"POST /ok? hello"
        assert refusal_of(sock, buffer)[0] == 400


def test_pipelined_requests_before_a_bad_chunk_are_answered_in_order_and_the_broken_one_never_runs():
    ran = []

    async def noting(scope, receive, send):
        ran.append(scope["path"])
        if scope["path"] == "/one":
            await asyncio.sleep(0.5)  # /broken waits in the queue meanwhile
        await echo(scope, receive, send)

    with Running(noting) as running:
        sock = running.connect()
        sock.sendall(post(b"/one", b"1") + post(b"/two", b"2") +
                     b"POST /broken HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel")
        time.sleep(0.2)  # the broken request's body goes bad in a later packet
        sock.sendall(b"lo\r\nzz\r\n")
        buffer = bytearray()
        assert [read_response(sock, buffer)[2] for _ in range(2)] == [b"POST /one? 1", b"POST /two? 2"]
        assert refusal_of(sock, buffer)[0] == 400
    assert ran == ["/one", "/two"]


def test_a_bad_chunk_arriving_after_the_application_started_gets_400_and_the_application_a_disconnect():
    seen = []
    reading = recording_reader(seen)

    with Running(reading) as running:
        sock = running.connect()
        sock.sendall(H + b"transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
        time.sleep(0.2)
        sock.sendall(b"not-a-size\r\n")
        assert refusal_of(sock)[0] == 400
        wait_for_disconnect(seen)
        assert seen == ["http.request", "http.disconnect"]


def test_a_slow_head_behind_a_response_in_flight_is_refused_after_that_response_not_during_it():
    async def slow_stream(scope, receive, send):
        await read_all(receive)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for n in range(4):
            await asyncio.sleep(0.4)
            await send({"type": "http.response.body", "body": b"part%d;" % n, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    with Running(slow_stream, header_timeout=0.2) as running:
        sock = running.connect()
        sock.sendall(post(b"/stream", b"") + b"GET /next HTTP/1.1\r\nhost: x\r\n")  # and never the blank line
        buffer = bytearray()
        status, _, body = read_response(sock, buffer)
        assert status == b"HTTP/1.1 200 OK" and body == b"part0;part1;part2;part3;"
        assert refusal_of(sock, buffer)[0] == 408


def test_trailer_fields_are_read_but_never_become_request_headers():
    seen = []

    async def headers_after_body(scope, receive, send):
        await read_all(receive)
        seen.append([name for name, _ in scope["headers"]])
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with Running(headers_after_body) as running:
        sock = running.connect()
        sock.sendall(H + b"transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
                         b"authorization: Bearer smuggled\r\nx-trailer: 1\r\n\r\n" + post(b"/next", b""))
        buffer = bytearray()
        assert [read_response(sock, buffer)[2] for _ in range(2)] == [b"ok", b"ok"]  # the connection goes on
    assert seen == [[b"host", b"transfer-encoding"], [b"host", b"content-length"]]


def trickle(sock, total: int, every: float, until: float) -> bytes:
    """Send a body one byte every `every` seconds until the server answers or `until` passes; the answer."""
    sock.settimeout(every)
    deadline, sent = time.monotonic() + until, 0
    while time.monotonic() < deadline and sent < total:
        try:
            answer = sock.recv(4096)
            return answer
        except TimeoutError:
            sock.sendall(b"x")
            sent += 1
    return b""


def test_a_body_trickling_in_below_the_minimum_rate_gets_408_though_it_never_pauses_for_long():
    with Running(echo, body_timeout=0.8, body_min_rate=10) as running:
        sock = running.connect()
        sock.sendall(H + b"content-length: 1000\r\n\r\n")
        answer = trickle(sock, 1000, every=0.3, until=8)  # 3.3 bytes/s: no pause near body_timeout
        assert answer.startswith(b"HTTP/1.1 408") and b"arrived too slowly" in answer


def test_a_body_past_the_deadline_gets_408_however_fast_it_arrives():
    with Running(echo, body_timeout=0.8, body_min_rate=0, body_deadline=1.5) as running:
        sock = running.connect()
        sock.sendall(H + b"content-length: 1000\r\n\r\n")
        answer = trickle(sock, 1000, every=0.1, until=8)
        assert answer.startswith(b"HTTP/1.1 408") and b"arrived too slowly" in answer


def test_without_rate_and_deadline_a_trickling_body_is_served_to_its_end():
    """The control: the same trickle, rate and deadline off, is not cut (the stall timeout alone never fires)."""
    with Running(echo, body_timeout=0.8, body_min_rate=0, body_deadline=0) as running:
        sock = running.connect()
        sock.sendall(H + b"content-length: 8\r\n\r\n")
        answer = trickle(sock, 8, every=0.3, until=8)
        if not answer:
            answer = read_response(sock)[2]
        assert answer.endswith(b"POST /r? xxxxxxxx")


def test_time_the_server_spends_not_reading_a_body_is_not_held_against_the_client():
    """An application that reads a large body late: reading pauses (back-pressure), and that pause
    does not count toward the body's deadline or stall timeout."""
    started = threading.Event()

    async def late_reader(scope, receive, send):
        started.set()
        await asyncio.sleep(2.5)  # past body_timeout and body_deadline while the client is blocked
        await echo(scope, receive, send)

    size = 3 * 1024 * 1024
    with Running(late_reader, body_timeout=0.8, body_deadline=1.5, body_min_rate=0) as running:
        sock = running.connect()
        sock.sendall(H + b"content-length: %d\r\n\r\n" % size + b"z" * size)
        status, _, body = read_response(sock)
        assert status == b"HTTP/1.1 200 OK" and body == b"POST /r? " + b"z" * size


def test_an_application_failure_is_a_json_500():
    async def failing(scope, receive, send):
        raise ValueError("boom")

    with Running(failing) as running:
        sock = running.connect()
        sock.sendall(post(b"/x", b""))
        status, error = refusal_of(sock)
        assert status == 500 and error["code"] == "internal_error" and "boom" not in error["message"]


def test_the_gateway_process_takes_its_body_limits_from_the_settings(settings):
    from gateway.__main__ import body_limits

    settings.SWITCHYARD_GATEWAY_BODY_TIMEOUT, settings.SWITCHYARD_GATEWAY_BODY_MIN_RATE = 7, 2048
    settings.SWITCHYARD_GATEWAY_BODY_DEADLINE = 0
    assert body_limits() == {"body_timeout": 7, "body_min_rate": 2048, "body_deadline": 0}
