"""What goes on the wire besides the application's own bytes: status lines, canned answers, limits."""
from __future__ import annotations

import http

BODY_HIGH_WATER = 1 << 20  # unread request body bytes before reading pauses
MAX_PIPELINED = 16  # requests parsed ahead of the one being answered before reading pauses
ASGI = {"version": "3.0", "spec_version": "2.3"}
DISCONNECT = {"type": "http.disconnect"}
DISCONNECT_EXTENSION = "switchyard.disconnect"
STATUS_LINES = {status.value: b"HTTP/1.1 %d %s\r\n" % (status.value, status.phrase.encode())
                for status in http.HTTPStatus}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def status_line(status: int) -> bytes:
    return STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status


def plain_response(status: int, text: str) -> bytes:
    body = text.encode()
    return (status_line(status) + b"content-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body))


# What the server does with a response header, by name. Names are checked once (no CR, LF or colon)
# and remembered: applications send the same few names on every response.
ORDINARY, CONTENT_LENGTH, TRANSFER_ENCODING, CONNECTION = "ordinary", "length", "framing", "connection"
_SPECIAL_HEADERS = {b"content-length": CONTENT_LENGTH, b"transfer-encoding": TRANSFER_ENCODING,
                    b"connection": CONNECTION}
MAX_KNOWN_HEADER_NAMES = 1024  # past this, names are checked every time (an app inventing names)
_known_header_names: dict[bytes, str] = {}


def header_kind(name: bytes) -> str:
    """ORDINARY, CONTENT_LENGTH, TRANSFER_ENCODING or CONNECTION; a name that cannot be sent raises."""
    kind = _known_header_names.get(name)
    if kind is None:
        if name.find(b"\r") >= 0 or name.find(b"\n") >= 0 or name.find(b":") >= 0:
            raise RuntimeError(f"invalid response header {name!r}")
        kind = _SPECIAL_HEADERS.get(name.lower(), ORDINARY)
        if len(_known_header_names) < MAX_KNOWN_HEADER_NAMES:
            _known_header_names[name] = kind
    return kind
