"""What goes on the wire besides the application's own bytes: status lines, canned answers, limits."""
from __future__ import annotations

import http

from gateway.errors import error_body

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


def error_response(status: int, code: str, message: str) -> bytes:
    """A whole answer in OpenAI's error shape, then the connection closes.

    The server's own refusals are shaped like the gateway's: its clients parse every error body as one."""
    body = error_body(status, code, message)
    return (status_line(status) + b"content-type: application/json\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body))


class Refused(Exception):
    """A request the server answers itself (status, stable code, message), then closes the connection.

    Raised from a parser callback it stops the parse (httptools re-raises it as the context of its
    HttpParserCallbackError)."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def response(self) -> bytes:
        return error_response(self.status, self.code, self.message)


def malformed(reason: str) -> Refused:
    """400 for bytes that are not an HTTP/1.1 request; `reason` is llhttp's (a fixed phrase).

    HTTP/2's connection preface (`PRI * HTTP/2.0`, a client assuming h2c) is told the version is not served."""
    if reason == _H2_PREFACE:
        return Refused(*VERSION_NOT_SUPPORTED)
    return Refused(400, "malformed_request", f"Malformed HTTP request: {reason[:200]}.")


_H2_PREFACE = "Pause on PRI/Upgrade"  # llhttp's reason for HTTP/2's preface


# The refusals, as Refused's arguments: an exception instance is made per raise (re-raising one
# instance would grow its traceback every time).
HEADERS_TOO_LARGE = (431, "headers_too_large", "The request line and headers are too large.")
URL_TOO_LONG = (414, "url_too_long", "The request URL is too long.")
HOST_REQUIRED = (400, "invalid_host", "An HTTP/1.1 request needs exactly one Host header.")
VERSION_NOT_SUPPORTED = (505, "http_version_not_supported", "Only HTTP/1.1 and HTTP/1.0 are served.")
CODING_NOT_FRAMED = (400, "invalid_transfer_encoding",
                     "Transfer-Encoding must end with chunked (the body length is unknown otherwise).")
CODING_NOT_SUPPORTED = (501, "unsupported_transfer_encoding", "Only the chunked transfer coding is supported.")
CODING_IN_HTTP_1_0 = (400, "invalid_transfer_encoding", "HTTP/1.0 requests cannot use Transfer-Encoding.")
HEADERS_TIMEOUT = (408, "request_timeout", "The request headers did not arrive in time.")
BODY_STALLED = (408, "request_timeout", "The request body stopped arriving.")
BODY_TOO_SLOW = (408, "request_timeout", "The request body arrived too slowly.")
APP_FAILED = error_response(500, "internal_error", "The server failed to answer the request.")


def too_many_headers(limit: int) -> tuple:
    return 431, "too_many_headers", f"The request has more than {limit} header fields."


def transfer_coding_refusal(values: list[bytes], version: str) -> tuple | None:
    """The refusal of a request's Transfer-Encoding values (None for a lone `chunked` in HTTP/1.1).

    RFC 9112: a request whose last coding is not chunked has no knowable length: 400 (6.3); a coding
    the server does not implement ahead of chunked: 501 (6.1); HTTP/1.0 has no transfer codings, its
    framing is faulty (6.1). llhttp lets the last two through."""
    if version == "1.0":
        return CODING_IN_HTTP_1_0
    if len(values) == 1 and values[0].lower() == b"chunked":
        return None
    last = b",".join(values).rsplit(b",", 1)[-1].strip().lower()
    return CODING_NOT_SUPPORTED if last == b"chunked" else CODING_NOT_FRAMED


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
