"""The request body: parsed once, checked enough to route and limit it, re-encoded per pool kind.

Deeper validation (context length, sampling parameters) stays with the engine, whose 400s
are passed through unchanged.
"""
from __future__ import annotations

import json
from json.encoder import c_make_encoder, encode_basestring

from gateway import errors, request_checks

CHARS_PER_TOKEN = 4  # a cheap prompt estimate for reservations; settled with the engine's count
DEFAULT_COMPLETION_RESERVE = 1024  # reserved (and, under a token budget, the cap) without max_tokens
BATCH_PRIORITY = 10  # vLLM runs lower numbers first; interactive requests keep the default 0
_json_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
# One C encoder for every request (JSONEncoder.encode builds a new one per call), without the
# circular-reference check: bodies come from json.loads plus a few plain fields, never cycles.
_c_encode = c_make_encoder and c_make_encoder(None, _json_encoder.default, encode_basestring, None,
                                              ":", ",", False, False, True)
_scan_json = json.JSONDecoder().scan_once  # what json.loads runs, without its per-call Python steps


def _encode(value: dict) -> str:
    return "".join(_c_encode(value, 0)) if _c_encode else _json_encoder.encode(value)


def _loads(body: bytes):
    """json.loads(body), quicker for the usual body: UTF-8 starting with `{` and nothing after `}`."""
    if body[:1] != b"{" or body[1:2] == b"\x00":  # json.loads detects UTF-16/32 from zero bytes
        return json.loads(body)
    # Strict, unlike json.loads' surrogatepass: encoded surrogates are not UTF-8 (check_values
    # finds them in the other encodings json.loads accepts, and as \ud800 escapes).
    text = body.decode("utf-8")
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
        return json.loads(text)  # raises the usual error
    return value if end == len(text) else json.loads(text)  # trailing whitespace or extra data


def json_object(body: bytes, texts: list[str] | None = None) -> dict:
    """The request body as a JSON object, or a 400 saying what it is instead.

    `texts` (a list) receives the body's strings long enough to hold a secret (redact_body's hint).
    """
    try:
        payload = _loads(body)
    except (ValueError, UnicodeDecodeError):
        raise errors.bad_request("invalid_json", "The request body is not valid JSON.") from None
    except RecursionError:  # the scanner recurses per level: ~900 levels deep in the gateway's stack
        raise request_checks.too_deep() from None
    if not isinstance(payload, dict):
        raise errors.bad_request("invalid_body", "The request body must be a JSON object.")
    request_checks.check_values(payload, [] if texts is None else texts)
    return payload


def parse_payload(body: bytes, kind: str, texts: list[str] | None = None) -> dict:
    """A JSON object naming a model, with a prompt (completions) or messages (chat); see json_object."""
    payload = json_object(body, texts)
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise errors.bad_request("missing_model", "Name a model in the 'model' field.")
    _check_input(payload, kind)
    _check_fields(payload)
    return payload


def _check_input(payload: dict, kind: str) -> None:
    if kind == "chat":
        request_checks.check_messages(payload.get("messages"))
    elif not isinstance(payload.get("prompt"), (str, list)):
        raise errors.bad_request("invalid_prompt", "'prompt' must be a string or a list.")


def _check_fields(payload: dict) -> None:
    stream = payload.get("stream", False)
    if stream is not True and stream is not False:
        raise errors.bad_request("invalid_stream", "'stream' must be true or false.")
    request_checks.check_stream_options(payload)
    for name in _TOKEN_FIELDS:
        value = payload.get(name)
        # type(), not isinstance: bool is an int, and JSON gives no other int subclass
        if value is not None and (type(value) is not int or value < 1):
            raise errors.bad_request("invalid_max_tokens", f"'{name}' must be a positive integer.")


_TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")


def max_tokens(payload: dict) -> int | None:
    """The completion length the client asked for, if any."""
    return payload.get("max_tokens") or payload.get("max_completion_tokens")


def estimate_prompt_tokens(payload: dict, kind: str) -> int:
    """Roughly how many tokens the prompt holds (characters / 4), before the engine counts."""
    if kind == "chat":
        chars = sum(_text_length(m.get("content")) for m in payload["messages"])
    else:
        chars = _text_length(payload.get("prompt"))
    return chars // CHARS_PER_TOKEN + 1


def _text_length(value) -> int:
    """Characters of text in a prompt, a batch, token ids or chat content parts."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, int):  # a token id
        return CHARS_PER_TOKEN
    if isinstance(value, dict):
        return _text_length(value.get("text"))
    if isinstance(value, list):
        return sum(_text_length(v) for v in value)
    return 0


def upstream_body(payload: dict, *, salt: str | None, priority: int | None) -> bytes:
    """The body an engine gets: usage on streams, the tenant's cache salt, the priority."""
    out = dict(payload)
    out.pop("priority", None)  # the class comes from x-switchyard-priority, not from the body
    if out.get("stream"):
        out["stream_options"] = {**(out.get("stream_options") or {}), "include_usage": True}
    if salt:
        # Keep the client's own salt meaningful within the tenant, never across tenants.
        client_salt = out.get("cache_salt")
        out["cache_salt"] = f"{salt}:{client_salt}" if isinstance(client_salt, str) and client_salt else salt
    if priority:
        out["priority"] = priority
    return _encode(out).encode()


def wants_usage(payload: dict) -> bool:
    """Did the client itself ask for the final usage chunk of a stream?"""
    options = payload.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def prompt_sample(body: dict, kind: str, chars: int) -> str:
    """The start of the (already redacted) prompt, for the slow-requests page; "" when chars is 0."""
    if chars <= 0:
        return ""
    if kind == "chat":
        lines, size = [], 0
        for m in body.get("messages", ()):
            if isinstance(m, dict):
                lines.append(f"{m.get('role', '')}: {_text_of(m.get('content'))}")
                size += len(lines[-1]) + 1
                if size > chars:  # the text so far (size - 1 with its newlines) fills the sample
                    break
        text = "\n".join(lines)
    else:
        prompt = body.get("prompt", "")
        text = prompt if isinstance(prompt, str) else "\n".join(p for p in prompt if isinstance(p, str))
    return text[:chars]


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: the text ones, and bare strings
        return " ".join(text for text in map(_part_text, content) if text)
    return ""


def _part_text(part) -> str:
    if isinstance(part, str):
        return part
    kind = part.get("type", "text") if isinstance(part, dict) else None
    key = _TEXT_PART_KEYS.get(kind) if isinstance(kind, str) else None
    text = part.get(key) if key else None
    return text if isinstance(text, str) else ""


# What vLLM reads as text from a content part, by type (gateway.request_checks.PART_SHAPES).
_TEXT_PART_KEYS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal",
                   "thinking": "thinking"}
