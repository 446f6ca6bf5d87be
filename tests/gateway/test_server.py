"""gateway.server, the gateway's HTTP/1.1 server, over raw sockets: framing, keep-alive, pipelining,
limits, timeouts, failures and shutdown."""
import asyncio
import threading
import time

import pytest

from gateway.server import HttpServer
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
from tests.processes import free_port


def test_keep_alive_requests_get_one_content_length_a_date_and_no_server_header():
    with Running(echo) as running:
        sock = running.connect()
        buffer = bytearray()
        for n in range(3):
            sock.sendall(post(b"/v1/x?n=%d" % n, b"hello %d" % n))
            status, headers, body = read_response(sock, buffer)
            assert status == b"HTTP/1.1 200 OK"
            assert body == b"POST /v1/x?n=%d hello %d" % (n, n)
            assert headers[b"content-length"] == [b"%d" % len(body)]  # exactly once
            assert len(headers[b"date"]) == 1 and b"server" not in headers
            assert b"connection" not in headers
        sock.close()


def test_pipelined_requests_are_answered_in_order():
    with Running(echo) as running:
        sock = running.connect()
        sock.sendall(b"".join(post(b"/p%d" % n, b"body%d" % n) for n in range(5)))
        buffer = bytearray()
        assert [read_response(sock, buffer)[2] for _ in range(5)] == [b"POST /p%d? body%d" % (n, n) for n in range(5)]


def test_chunked_request_body_and_percent_encoded_path():
    with Running(echo) as running:
        sock = running.connect()
        sock.sendall(b"POST /a%20b HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                     b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        assert read_response(sock)[2] == b"POST /a b? hello world"


def test_expect_100_continue_is_answered_when_the_app_reads_the_body():
    with Running(echo) as running:
        sock = running.connect()
        sock.sendall(b"POST /c HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\nexpect: 100-continue\r\n\r\n")
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"data")
        assert read_response(sock)[2] == b"POST /c? data"


def test_head_gets_headers_without_a_body():
    with Running(echo) as running:
        sock = running.connect()
        sock.sendall(b"HEAD /h HTTP/1.1\r\nhost: x\r\n\r\nPOST /after HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        buffer = bytearray()
        status, headers, _ = read_response(sock, buffer, head_only=True)
        assert status == b"HTTP/1.1 200 OK" and headers[b"content-length"] == [b"9"]  # len("HEAD /h? ")
        # No body followed: the next bytes are the next response.
        assert read_response(sock, buffer)[2] == b"POST /after? "


def test_a_stream_without_length_is_chunked_and_its_head_leaves_before_the_first_chunk():
    async def stream(scope, receive, send):
        await read_all(receive)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await asyncio.sleep(0.3)
        for n in range(3):
            await send({"type": "http.response.body", "body": b"data: %d\n\n" % n, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    with Running(stream) as running:
        sock = running.connect()
        sock.sendall(post(b"/s", b""))
        sock.settimeout(0.25)
        early = sock.recv(4096)  # within 0.25 s, before any chunk exists
        assert early.startswith(b"HTTP/1.1 200 OK") and early.endswith(b"\r\n\r\n")
        sock.settimeout(5)
        buffer = bytearray(b"")
        # The head was consumed; read the chunks by hand.
        while not buffer.endswith(b"0\r\n\r\n"):
            buffer += sock.recv(4096)
        assert bytes(buffer) == b"".join(b"%x\r\ndata: %d\n\n\r\n" % (9, n) for n in range(3)) + b"0\r\n\r\n"


def test_heads_of_several_streams_started_together_all_leave_before_their_first_chunks():
    arrived = []

    async def stream(scope, receive, send):
        await read_all(receive)
        arrived.append(asyncio.get_running_loop().create_future())
        if len(arrived) < 4:
            await arrived[-1]
        else:  # all four start their responses in the same event-loop iteration
            for waiting in arrived[:-1]:
                waiting.set_result(None)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await asyncio.sleep(0.5)
        await send({"type": "http.response.body", "body": b"late"})

    with Running(stream) as running:
        socks = [running.connect() for _ in range(4)]
        for sock in socks:
            sock.sendall(post(b"/s", b""))
        time.sleep(0.3)  # the chunks come 0.5 s after the heads
        for sock in socks:
            sock.setblocking(False)
            early = sock.recv(4096)
            assert early.startswith(b"HTTP/1.1 200 OK") and early.endswith(b"\r\n\r\n") and b"late" not in early
        for sock in socks:
            sock.settimeout(5)
            rest = b""
            while not rest.endswith(b"0\r\n\r\n"):
                rest += sock.recv(4096)
            assert rest == b"4\r\nlate\r\n0\r\n\r\n"


def test_malformed_request_gets_400_and_the_connection_closes():
    with Running(echo) as running:
        sock = running.connect()
        sock.sendall(b"GARBAGE\x01 / HTTP/1.1\r\n\r\n")
        status, _, _ = read_response(sock)
        assert status.startswith(b"HTTP/1.1 400")
        assert closed_by_server(sock)


def test_too_large_headers_get_431():
    with Running(echo, max_header_bytes=1024) as running:
        sock = running.connect()
        sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 2000 + b"\r\n\r\n")
        status, _, _ = read_response(sock)
        assert status.startswith(b"HTTP/1.1 431")
        assert closed_by_server(sock)


def test_idle_keep_alive_connections_close_after_the_timeout():
    with Running(echo, keep_alive_timeout=0.2) as running:
        sock = running.connect()
        sock.sendall(post(b"/k", b""))
        read_response(sock)
        assert closed_by_server(sock, within=5)  # the 0.2 s timeout, not the client, ended it


def test_a_client_slow_to_send_its_headers_is_dropped():
    with Running(echo, header_timeout=0.2) as running:
        sock = running.connect()
        sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n")  # and never the blank line
        status, _, _ = read_response(sock)
        assert status.startswith(b"HTTP/1.1 408")
        assert closed_by_server(sock)


def test_an_app_failure_before_the_response_is_a_500_after_it_a_closed_connection(caplog):
    async def failing(scope, receive, send):
        await read_all(receive)
        if scope["path"] == "/late":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise ValueError("boom")

    with Running(failing) as running:
        sock = running.connect()
        sock.sendall(post(b"/early", b""))
        status, headers, _ = read_response(sock)
        assert status.startswith(b"HTTP/1.1 500") and headers[b"connection"] == [b"close"]
        assert closed_by_server(sock)
        sock = running.connect()
        sock.sendall(post(b"/late", b""))
        data = b""
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        assert b"partial" in data and not data.endswith(b"0\r\n\r\n")  # cut, not completed


def test_an_app_waiting_on_receive_learns_that_the_client_left():
    left = threading.Event()

    async def waiting(scope, receive, send):
        await read_all(receive)
        if (await receive())["type"] == "http.disconnect":
            left.set()

    with Running(waiting) as running:
        sock = running.connect()
        sock.sendall(post(b"/w", b"x"))
        time.sleep(0.1)
        sock.close()
        assert left.wait(5)


def test_connection_close_is_honoured():
    with Running(echo) as running:
        sock = running.connect()
        sock.sendall(post(b"/c", b"", b"connection: close\r\n"))
        _, headers, _ = read_response(sock)
        assert headers[b"connection"] == [b"close"]
        assert closed_by_server(sock)


def test_a_large_body_arrives_whole():
    size = 5 * 1024 * 1024
    with Running(echo) as running:
        sock = running.connect()
        sock.sendall(post(b"/big", b"z" * size))
        assert read_response(sock)[2] == b"POST /big? " + b"z" * size


def test_stopping_lets_a_request_in_flight_finish():
    async def slow(scope, receive, send):
        await read_all(receive)
        await asyncio.sleep(0.5)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
        await send({"type": "http.response.body", "body": b"done"})

    running = Running(slow)
    with running:
        sock = running.connect()
        sock.sendall(post(b"/slow", b""))
        time.sleep(0.1)
        running.server.should_exit = True
        status, _, body = read_response(sock)
        assert status == b"HTTP/1.1 200 OK" and body == b"done"
    assert not running.thread.is_alive()


def test_a_failed_startup_stops_the_server():
    async def app(scope, receive, send):
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "no database"})

    server = HttpServer(app, port=free_port(), install_signals=False)
    with pytest.raises(SystemExit):
        server.run()
    assert not server.started


def test_the_disconnect_extension_calls_back_once_when_the_client_leaves_before_the_answer():
    calls, finished = [], threading.Event()

    async def waiting(scope, receive, send):
        await read_all(receive)
        scope["extensions"]["switchyard.disconnect"](lambda: calls.append(scope["path"]))
        for _ in range(100):
            if calls:
                break
            await asyncio.sleep(0.02)
        finished.set()

    async def answered(scope, receive, send):
        await read_all(receive)
        scope["extensions"]["switchyard.disconnect"](lambda: calls.append(scope["path"]))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        await asyncio.sleep(0.2)  # still running after a complete answer: a disconnect now is no cancellation

    async def route(scope, receive, send):
        await (waiting if scope["path"] == "/wait" else answered)(scope, receive, send)

    with Running(route) as running:
        sock = running.connect()
        sock.sendall(post(b"/wait", b""))
        time.sleep(0.1)
        sock.close()
        assert finished.wait(5) and calls == ["/wait"]
        sock = running.connect()
        sock.sendall(post(b"/done", b""))
        assert read_response(sock)[2] == b"ok"
        sock.close()
        time.sleep(0.4)
        assert calls == ["/wait"]


def test_an_answer_before_the_whole_body_arrived_closes_the_connection():
    async def too_large(scope, receive, send):
        await send({"type": "http.response.start", "status": 413, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    with Running(too_large) as running:
        sock = running.connect()
        sock.sendall(b"POST /big HTTP/1.1\r\nhost: x\r\ncontent-length: 100000000\r\n\r\n" + b"x" * 65536)
        status, headers, _ = read_response(sock)
        assert status.startswith(b"HTTP/1.1 413") and headers[b"connection"] == [b"close"]
        assert closed_by_server(sock)


def test_a_request_body_that_stops_arriving_gets_408_and_the_application_sees_a_disconnect():
    seen = []
    reading = recording_reader(seen)

    with Running(reading, body_timeout=0.3) as running:
        sock = running.connect()
        sock.sendall(b"POST /slow HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n0123456789")
        status, headers, body = read_response(sock)
        assert status.startswith(b"HTTP/1.1 408") and headers[b"connection"] == [b"close"]
        assert b'"code":"request_timeout"' in body
        assert closed_by_server(sock)
        wait_for_disconnect(seen)
        assert seen[0] == "http.request" and seen[-1] == "http.disconnect"


def test_a_response_header_that_would_split_the_head_is_refused_even_for_a_name_sent_before():
    async def noting(scope, receive, send):
        await read_all(receive)
        note = {"/ok": (b"x-note", b"fine"), "/value": (b"x-note", b"bad\r\ninjected: yes"),
                "/lf": (b"x-note", b"bad\ninjected: yes"), "/name": (b"x-note:", b"v"),
                "/crname": (b"x-note\r\ninjected", b"v")}[scope["path"]]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [note, (b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with Running(noting) as running:
        for path in (b"/ok", b"/value", b"/ok", b"/lf", b"/name", b"/crname", b"/ok"):
            sock = running.connect()
            sock.sendall(post(path, b""))
            if path == b"/ok":
                _, headers, body = read_response(sock)
                assert headers[b"x-note"] == [b"fine"] and body == b"ok"
            else:  # the application's error: nothing of its head leaves, the connection closes
                data = b""
                while chunk := sock.recv(4096):
                    data += chunk
                assert b"injected" not in data and b"200 OK" not in data
            sock.close()


def test_answered_requests_leave_no_reference_cycles_for_the_garbage_collector():
    """The disconnect extension in the scope points back at the request's cycle: the server drops
    the scope when the request ends, so reference counting frees it (the GC once found ten
    objects a request)."""
    import gc

    from gateway.server.cycle import Cycle

    with Running(echo) as running:
        sock = running.connect()
        for index in range(3):  # warm: connection and first-request state
            sock.sendall(b"POST /warm HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\n%d" % index)
            read_response(sock)
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for index in range(20):
                sock.sendall(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\n%d" % (index % 10))
                assert read_response(sock)[0].startswith(b"HTTP/1.1 200")
            time.sleep(0.1)  # the server thread finishes its bookkeeping after the last write
            gc.collect()
            cycles = [obj for obj in gc.garbage if isinstance(obj, Cycle)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        sock.close()
    assert cycles == []
