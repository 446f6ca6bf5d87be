"""The gateway's HTTP/1.1 client to the engines, against raw asyncio servers that misbehave on cue."""
import asyncio
import socket

import pytest

from gateway.clients.engine import COALESCE_LIMIT, HIGH_WATER, ConnectTimeout, UpstreamClient, UpstreamError


class Server:
    """A raw HTTP server: `handler(reader, writer, request_head, body)` answers each request."""

    def __init__(self, handler):
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.closed_by_client = asyncio.Event()

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _serve(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                if await self.handler(reader, writer, head, body) == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_by_client.set()
        finally:
            writer.close()


def ok(body: bytes = b'{"ok": true}', status: bytes = b"200 OK"):
    async def handler(reader, writer, head, request_body):
        writer.write(b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
    return handler


def run(scenario):
    return asyncio.run(asyncio.wait_for(scenario(), 20))


def test_keep_alive_connections_are_reused_and_bodies_round_trip():
    async def scenario():
        async with Server(ok(b'{"answer": 42}')) as server:
            client = UpstreamClient(connect_timeout=2)
            for i in range(5):
                response = await client.post(server.url + "/v1/completions", b'{"n": %d}' % i,
                                             ((b"content-type", b"application/json"),))
                assert (response.status, response.content_type) == (200, b"application/json")
                assert await response.read() == b'{"answer": 42}'
                response.close()
            await client.close()
            assert server.connections == 1
            assert server.requests[4].endswith(b'\r\n\r\n{"n": 4}')
            assert b"POST /v1/completions HTTP/1.1\r\n" in server.requests[0]
    run(scenario)


def test_chunked_stream_arrives_piece_by_piece():
    go_on = asyncio.Event

    async def scenario():
        release = go_on()

        async def handler(reader, writer, head, body):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            writer.write(b"7\r\ndata: 1\r\n")
            await writer.drain()
            await release.wait()
            writer.write(b"7\r\ndata: 2\r\n0\r\n\r\n")
            await writer.drain()

        async with Server(handler) as server:
            client = UpstreamClient(connect_timeout=2)
            response = await client.post(server.url + "/v1/completions", b"{}")
            assert await response.readany() == b"data: 1"  # before the engine sent the rest
            release.set()
            assert await response.readany() == b"data: 2"
            assert await response.readany() == b""
            response.close()
            await client.close()
    run(scenario)


def test_a_keep_alive_connection_the_engine_closed_while_idle_is_replaced_without_losing_the_request():
    async def scenario():
        async def answer_then_close(reader, writer, head, body):
            await ok()(reader, writer, head, body)
            return "close"  # keep-alive was promised, but the engine drops the idle connection

        async with Server(answer_then_close) as server:
            client = UpstreamClient(connect_timeout=2)
            for pause in [0.05] * 3 + [0] * 20:  # the close arrives while idle, or just after the next send
                response = await client.post(server.url + "/x", b"{}")
                assert await response.read() == b'{"ok": true}'
                response.close()
                await asyncio.sleep(pause)
            await client.close()
            assert (server.connections, len(server.requests)) == (23, 23)
    run(scenario)


def test_after_a_stale_keep_alive_connection_the_retry_opens_a_fresh_one_not_the_next_idle_one():
    """Idle connections age together: after a burst the pool holds many, and on a loaded host the engine's
    keep-alive timer can close them before the gateway notices. Each reused one may be just as stale, so
    the one retry goes on a new connection — else one request fails on two stale ones (a 502 when its
    deployment has a single engine to fail over to)."""
    async def scenario():
        answered: set = set()
        both_arrived = asyncio.Event()

        async def once_per_connection(reader, writer, head, body):
            if writer in answered:  # the keep-alive timer fired as this request arrived: closed unanswered
                return "close"
            answered.add(writer)
            if len(answered) == 2:
                both_arrived.set()
            await both_arrived.wait()  # two requests in flight at once: two connections
            await ok()(reader, writer, head, body)

        async with Server(once_per_connection) as server:
            client = UpstreamClient(connect_timeout=2)

            async def call():
                response = await client.post(server.url + "/x", b"{}")
                body = await response.read()
                response.close()
                return body

            assert await asyncio.gather(call(), call()) == [b'{"ok": true}'] * 2
            assert await call() == b'{"ok": true}'  # both idle connections are stale; the third is fresh
            await client.close()
            assert server.connections == 3
    run(scenario)


def test_closing_an_unfinished_response_closes_the_connection_so_the_engine_stops():
    async def scenario():
        async def endless(reader, writer, head, body):
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            while True:
                writer.write(b"5\r\ntoken\r\n")
                await writer.drain()
                await asyncio.sleep(0.01)

        async with Server(endless) as server:
            client = UpstreamClient(connect_timeout=2)
            response = await client.post(server.url + "/x", b"{}")
            assert (await response.readany()).startswith(b"token")
            response.close()
            await asyncio.wait_for(server.closed_by_client.wait(), 5)
            await client.close()
    run(scenario)


def test_a_timeout_while_waiting_for_headers_closes_the_connection():
    async def scenario():
        async def silent(reader, writer, head, body):
            await reader.read()  # never answers; returns when the client closes

        async with Server(silent) as server:
            client = UpstreamClient(connect_timeout=2)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await client.post(server.url + "/x", b"{}")
            await asyncio.sleep(0.05)
            assert not client._pools[server.url].idle
            await client.close()
    run(scenario)


def test_the_clients_own_header_deadline_raises_timeout_and_closes_the_connection():
    async def scenario():
        async def silent(reader, writer, head, body):
            await reader.read()  # never answers; returns when the client closes

        async with Server(silent) as server:
            client = UpstreamClient(connect_timeout=2)
            started = asyncio.get_running_loop().time()
            call = asyncio.ensure_future(client.post(server.url + "/x", b"{}", timeout=0.1))
            done, _ = await asyncio.wait({call}, timeout=30)  # a guard against a hang, not a timing
            assert call in done and isinstance(call.exception(), TimeoutError)
            assert asyncio.get_running_loop().time() - started >= 0.09  # raised by the deadline, not at once
            await asyncio.wait_for(server.closed_by_client.wait(), 2)  # the engine learns to stop
            assert not client._pools[server.url].idle
            await client.close()
    run(scenario)


def test_a_met_deadline_does_not_fire_later():
    async def scenario():
        async with Server(ok(b'{"n": 1}')) as server:
            client = UpstreamClient(connect_timeout=2)
            response = await client.post(server.url + "/x", b"{}", timeout=0.05)
            assert await response.read() == b'{"n": 1}'
            response.close()
            await asyncio.sleep(0.1)  # past the first call's deadline
            second = await client.post(server.url + "/x", b"{}", timeout=0.05)
            assert second.status == 200 and await second.read() == b'{"n": 1}'
            second.close()
            assert server.connections == 1  # kept alive across both
            await client.close()
    run(scenario)


def test_refused_reset_and_malformed_answers_are_upstream_errors():
    async def scenario():
        with socket.socket() as probe:  # a port nobody listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        client = UpstreamClient(connect_timeout=2)
        with pytest.raises(UpstreamError, match="cannot connect"):
            await client.post(f"http://127.0.0.1:{port}/x", b"{}")

        async def hang_up(reader, writer, head, body):
            return "close"
        async with Server(hang_up) as server:
            with pytest.raises(UpstreamError, match="closed the connection"):
                await client.post(server.url + "/x", b"{}")

        async def garbage(reader, writer, head, body):
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
            await writer.drain()
        async with Server(garbage) as server:
            with pytest.raises(UpstreamError, match="malformed"):
                await client.post(server.url + "/x", b"{}")

        async def cut_mid_body(reader, writer, head, body):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
            await writer.drain()
            return "close"
        async with Server(cut_mid_body) as server:
            response = await client.post(server.url + "/x", b"{}")
            with pytest.raises(UpstreamError):
                await response.read()
            response.close()
        await client.close()
    run(scenario)


def test_connect_timeout():
    async def scenario():
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        fillers = []
        try:
            for _ in range(4):  # fill the accept queue: further SYNs are dropped and connect hangs
                filler = socket.socket()
                filler.setblocking(False)
                filler.connect_ex(listener.getsockname())
                fillers.append(filler)
            client = UpstreamClient(connect_timeout=0.2)
            with pytest.raises(ConnectTimeout):
                await client.post("http://127.0.0.1:%d/x" % listener.getsockname()[1], b"{}")
        finally:
            for sock in [listener, *fillers]:
                sock.close()
    run(scenario)


def test_a_body_without_length_ends_with_the_connection_and_statuses_pass_through():
    async def scenario():
        async def old_style(reader, writer, head, body):
            writer.write(b"HTTP/1.0 503 Service Unavailable\r\ncontent-type: text/plain\r\n\r\nbusy, try later")
            await writer.drain()
            return "close"
        async with Server(old_style) as server:
            client = UpstreamClient(connect_timeout=2)
            response = await client.post(server.url + "/x", b"{}")
            assert (response.status, await response.read()) == (503, b"busy, try later")
            response.close()
            await client.close()
    run(scenario)


def test_reading_from_the_engine_pauses_while_the_client_is_slow_and_nothing_is_lost():
    payload = bytes(range(256)) * (4 * HIGH_WATER // 256)

    async def scenario():
        async with Server(ok(payload)) as server:
            client = UpstreamClient(connect_timeout=2)
            response = await client.post(server.url + "/x", b"{}")
            await asyncio.sleep(0.2)  # nobody reads: the buffer stops near the high-water mark
            assert response._buffered < 2 * HIGH_WATER
            assert response._conn._paused
            assert await response.read() == payload
            response.close()
            await client.close()
    run(scenario)


def test_request_heads_carry_the_headers_and_length_for_small_and_large_bodies():
    large = b"p" * (COALESCE_LIMIT + 1)  # sent as a head and a body without copying them together

    async def scenario():
        async with Server(ok()) as server:
            client = UpstreamClient(connect_timeout=2)
            for body in (b'{"small": 1}', large, b""):
                response = await client.post(server.url + "/v1/x?y=1", body,
                                             ((b"content-type", b"application/json"), (b"x-request-id", b"r-1")))
                assert await response.read() == b'{"ok": true}'
                response.close()
            await client.close()
            for sent, body in zip(server.requests, (b'{"small": 1}', large, b"")):
                head, _, rest = sent.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                assert lines[0] == b"POST /v1/x?y=1 HTTP/1.1" and rest == body
                assert sorted(lines[1:]) == sorted([b"host: " + server.url.split("//")[1].encode(),
                                                    b"content-type: application/json", b"x-request-id: r-1",
                                                    b"content-length: %d" % len(body)])
    run(scenario)
