"""Raw-socket helpers for the tests of gateway.server: a server in a thread, a response reader."""
import socket
import threading
import time

from gateway.server import HttpServer
from tests.processes import free_port


async def read_all(receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        assert message["type"] == "http.request"
        body += message["body"]
        if not message["more_body"]:
            return body


async def echo(scope, receive, send):
    """Answers `<method> <path>?<query> <body>` with a content-length."""
    body = await read_all(receive)
    answer = b"%s %s?%s %s" % (scope["method"].encode(), scope["path"].encode(), scope["query_string"], body)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(answer))]})
    await send({"type": "http.response.body", "body": answer})


def recording_reader(seen: list):
    """An app that reads its request body, noting each message's type, until the body ends or the client leaves."""
    async def reading(scope, receive, send):
        while True:
            message = await receive()
            seen.append(message["type"])
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                return
    return reading


def wait_for_disconnect(seen: list, timeout: float = 2.0) -> None:
    """Until a `recording_reader` has seen its disconnect (or `timeout` passed)."""
    deadline = time.monotonic() + timeout
    while "http.disconnect" not in seen and time.monotonic() < deadline:
        time.sleep(0.02)


def with_lifespan(handler):
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await handler(scope, receive, send)
    return app


class Running:
    def __init__(self, handler, **options):
        self.port = free_port()
        self.server = HttpServer(with_lifespan(handler), port=self.port, install_signals=False, **options)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        return sock


def read_response(sock: socket.socket, buffer: bytearray | None = None, head_only: bool = False
                  ) -> tuple[bytes, dict, bytes]:
    """One response: (status line, headers as a dict of lists, body); handles both framings."""
    buffer = buffer if buffer is not None else bytearray()

    def more() -> None:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed in the middle of a response: {bytes(buffer[:200])!r}")
        buffer.extend(chunk)

    while b"\r\n\r\n" not in buffer:
        more()
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    buffer[:] = rest
    status, *lines = head.split(b"\r\n")
    headers: dict = {}
    for line in lines:
        name, _, value = line.partition(b":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    if head_only:
        return status, headers, b""
    if b"content-length" in headers:
        size = int(headers[b"content-length"][0])
        while len(buffer) < size:
            more()
        body = bytes(buffer[:size])
        del buffer[:size]
        return status, headers, body
    body = b""
    if headers.get(b"transfer-encoding") == [b"chunked"]:
        while True:
            while b"\r\n" not in buffer:
                more()
            size_line, _, _ = bytes(buffer).partition(b"\r\n")
            size = int(size_line, 16)
            while len(buffer) < len(size_line) + 2 + size + 2:
                more()
            body += bytes(buffer[len(size_line) + 2:len(size_line) + 2 + size])
            del buffer[:len(size_line) + 2 + size + 2]
            if size == 0:
                return status, headers, body
    return status, headers, body


def closed_by_server(sock: socket.socket, within: float = 5.0) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, socket.timeout):
        return False


def post(path: bytes, body: bytes, extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n%s\r\n%s" % (path, len(body), extra, body)
