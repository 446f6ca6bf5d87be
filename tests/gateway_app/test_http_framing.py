"""The gateway process's HTTP framing end to end (its own server in front of the real app): a broken body
is a JSON 400 and a close at once, and a good request ahead of garbage still gets its completion."""
import json
import socket
from urllib.parse import urlsplit

import pytest

from tests.gateway.server_helpers import closed_by_server, read_response
from tests.gateway_app.conftest import MODEL

pytestmark = pytest.mark.django_db(transaction=True)


def connect(server) -> socket.socket:
    address = urlsplit(server.url)
    return socket.create_connection((address.hostname, address.port), timeout=10)


def completion_request(key: str, *, framing: bytes = b"") -> bytes:
    body = json.dumps({"model": MODEL, "prompt": "def f(", "max_tokens": 2}).encode()
    head = (b"POST /v1/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer %s\r\n"
            b"content-type: application/json\r\n") % key.encode()
    if framing:
        return head + framing
    return head + b"content-length: %d\r\n\r\n%s" % (len(body), body)


@pytest.mark.parametrize("framing", [
    b"transfer-encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"transfer-encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
    b"transfer-encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
])
def test_a_broken_request_body_is_a_json_refusal_and_a_close_at_once(served, framing):
    sock = connect(served.gateway)
    sock.sendall(completion_request(served.alice.key.raw, framing=framing))
    status, headers, body = read_response(sock)
    assert status.split()[1] in (b"400", b"501") and headers[b"connection"] == [b"close"]
    assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
    assert closed_by_server(sock)


def test_a_completion_followed_by_garbage_in_the_same_packet_is_answered_then_refused(served):
    sock = connect(served.gateway)
    sock.sendall(completion_request(served.alice.key.raw) + b"\x16\x03\x01 not http\r\n\r\n")
    buffer = bytearray()
    status, _, body = read_response(sock, buffer)
    assert status == b"HTTP/1.1 200 OK" and json.loads(body)["usage"]["completion_tokens"] == 2
    status, _, body = read_response(sock, buffer)
    assert status.startswith(b"HTTP/1.1 400") and json.loads(body)["error"]["code"] == "malformed_request"
    assert closed_by_server(sock)
