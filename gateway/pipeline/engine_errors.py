"""An engine's error answers in OpenAI's shape: whatever the engine (or a proxy in front of it) sends.

vLLM answers errors as `{"error": {"message", "type": "BadRequestError", "param", "code": 400}}`
(type a class name or an HTTP phrase, code the status as an integer), older vLLM as `{"object":
"error", "message", ...}`, FastAPI as `{"detail": "..."}` or `{"detail": [{"loc", "msg"}, ...]}`,
servers and proxies as plain text or HTML. Clients get `{"error": {"message", "type", "param",
"code"}}` (gateway/errors.py) with OpenAI's types and the gateway's codes: the engine's message
when it sent one, bounded and without stack traces; a status that says whose fault it was.
"""
from __future__ import annotations

import http
import json
import re

from gateway.errors import GatewayError

MAX_ERROR_BODY = 64 * 1024  # read of an engine's error answer; past it the answer counts as unreadable
MAX_MESSAGE_CHARS = 2000
_CONTEXT_LENGTH = re.compile(r"maximum context length|context length|too many tokens|prompt is too long", re.I)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)|\n\s*File \"[^\"]*\", line \d+")
_PARAM = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\[\]]{0,63}$")
_RETRY_SOON = [(b"retry-after", b"1")]


def engine_error(status: int, body: bytes) -> GatewayError:
    """The client's error for an engine answer with a non-2xx `status` and this (bounded) `body`."""
    message, param = _message_and_param(body)
    if status in (400, 422):  # the engine found the request itself wrong (context length, a field)
        code = "context_length_exceeded" if message and _CONTEXT_LENGTH.search(message) else "invalid_request"
        return GatewayError(status, code, message or "The model server refused the request.", param=param)
    if status == 413:
        return GatewayError(413, "request_too_large", message or "The model server found the request too large.")
    if status in (429, 503):  # vLLM's admission control (QueueOverflowError): busy, retry elsewhere or soon
        return GatewayError(503, "engine_overloaded", message or "The model server is busy; please retry.",
                            _RETRY_SOON)
    if status == 504:
        return GatewayError(504, "upstream_timeout", message or "The model server did not answer in time.")
    # Anything else (3xx, 401/403/404/405 and other 4xx, 500, 501, ...) is between the gateway and the
    # engine — its credentials, the model name it serves, a crash — not the client's doing.
    reason = message or f"The model server answered {status}{_phrase(status)}."
    return GatewayError(502, "upstream_error", reason)


def engine_error_event(event: bytes) -> GatewayError | None:
    """The error an SSE event carries (vLLM ends a failed stream with one), else None."""
    try:
        payload = json.loads(event.split(b"data:", 1)[1])
    except (IndexError, ValueError, RecursionError):
        return None
    if not _is_error(payload):
        return None
    inner = payload.get("error")
    code = (inner if isinstance(inner, dict) else payload).get("code")
    status = code if isinstance(code, int) and not isinstance(code, bool) and 300 <= code < 600 else 500
    return engine_error(status, event.split(b"data:", 1)[1])


def _is_error(payload) -> bool:
    return isinstance(payload, dict) and ("error" in payload or payload.get("object") == "error")


def _message_and_param(body: bytes) -> tuple[str | None, str | None]:
    """The message and parameter an error body names, if it is JSON in a shape engines use."""
    if not body or len(body) > MAX_ERROR_BODY:
        return None, None
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the decoder's limit
        return None, None
    if not isinstance(payload, dict):
        return None, None
    inner = payload.get("error")
    if isinstance(inner, dict):  # vLLM (and OpenAI-compatible servers)
        return _clean(inner.get("message")), _param(inner.get("param"))
    if isinstance(inner, str):
        return _clean(inner), None
    if payload.get("object") == "error" or "message" in payload:  # older vLLM
        return _clean(payload.get("message")), _param(payload.get("param"))
    return _clean(_detail(payload.get("detail"))), None  # FastAPI


def _detail(detail) -> str | None:
    """FastAPI's `detail`: a string, or validation errors `[{"loc": [...], "msg": ...}, ...]`."""
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list):
        parts = []
        for item in detail[:5]:
            if isinstance(item, dict) and isinstance(item.get("msg"), str):
                loc = ".".join(str(part) for part in item.get("loc") or () if part != "body")
                parts.append(f"{loc}: {item['msg']}" if loc else item["msg"])
        return "; ".join(parts) or None
    return None


def _clean(message) -> str | None:
    """A message fit for a client: a string, no stack trace, valid Unicode, bounded."""
    if not isinstance(message, str):
        return None
    found = _TRACEBACK.search(message)
    if found:
        message = message[:found.start()]
    message = message.encode("utf-8", "replace").decode("utf-8").strip()  # lone surrogates become "?"
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "…"
    return message or None


def _param(param) -> str | None:
    """vLLM names the field as `body.<field>` (pydantic's location); a client knows it as `<field>`."""
    if not isinstance(param, str):
        return None
    param = param.removeprefix("body.")
    return param if _PARAM.match(param) else None


def _phrase(status: int) -> str:
    """` <reason phrase>` of a status, or nothing for a status without one."""
    try:
        return " " + http.HTTPStatus(status).phrase
    except ValueError:
        return ""
