"""The request body: parsed once, checked enough to route and limit it, re-encoded per pool kind.

Deeper validation (context length, sampling parameters) stays with the engine, whose 400s
are passed through unchanged.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]  # typeshed omits the C encoder

from gateway import errors
from gateway.pipeline import request_checks

CHARS_PER_TOKEN = 4  # a likely prompt length (billed until the engine counts), never a bound
DEFAULT_COMPLETION_RESERVE = 1024  # a chat choice's length without max_tokens (the cap under a token budget)
BATCH_PRIORITY = 10  # vLLM runs lower numbers first; interactive requests keep the default 0
_json_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
# One C encoder for every request, without the circular-reference check: bodies come from
# json.loads plus a few plain fields, never cycles.
_c_encode = c_make_encoder and c_make_encoder(None, _json_encoder.default, encode_basestring, None,
                                              ":", ",", False, False, True)
_scan_json = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # what json.loads runs, without its per-call Python steps


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


def max_tokens(payload: dict, kind: str) -> int | None:
    """The completion length per choice the client asked for, if any, read as vLLM reads it:
    chat prefers `max_completion_tokens`; completions know only `max_tokens`."""
    if kind == "chat":
        asked = payload.get("max_completion_tokens")
        return asked if asked is not None else payload.get("max_tokens")
    return payload.get("max_tokens")


# --- The work a request may make the engine do: what admission reserves ---
# (docs/limits.md, "What a request reserves")

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # vLLM's completions default when max_tokens is absent (chat has none)
MAX_CHOICES = 128  # n and best_of: OpenAI's largest n
MAX_PROMPTS = 1024  # a completions batch: vLLM's VLLM_MAX_COMPLETION_PROMPTS default
# Template text the engine adds around what the body holds, in tokens (a byte-level BPE never makes
# more tokens of a text than it has UTF-8 bytes, so the body's bytes bound the rest):
CHAT_REQUEST_TOKENS = 128  # generation prompt, BOS, a template's default system prompt (DeepSeek-Coder's ~70)
CHAT_MESSAGE_TOKENS = 8  # per message, beyond its >= 24 bytes of JSON syntax the template does not render
PROMPT_TOKENS = 4  # per completions prompt: BOS and fill-in-the-middle sentinels
NON_TEXT_PART_TOKENS = 4096  # an image / audio / video content part (text-only engines refuse them)
_RENDERED_AGAIN = ("tools", "functions", "documents")  # chat fields a template may pretty-print into the prompt


@dataclass(slots=True)
class Work:
    """At most how many tokens a request can be billed: its prompt, and each choice's completion."""

    prompt_tokens: int  # an upper bound for the model's tokenizer (body bytes + template: `_body_bytes`)
    prompts: int  # a completions batch holds several, each with its own choices
    choices_per_prompt: int  # max(n, best_of)
    per_choice: int  # the completion length each choice may reach
    asked: bool  # the client named that length (else the engine must be told it)
    estimate: int  # the prompt's likely tokens (characters / 4): billed until the engine's usage arrives

    @property
    def completion_tokens(self) -> int:
        return self.prompts * self.choices_per_prompt * self.per_choice


def request_work(payload: dict, raw: bytes, kind: str) -> Work:
    """The worst case of a parsed request; 400 for a multiplier (n, best_of, a prompt batch) out of bounds.

    Beam search (`use_beam_search`) keeps `n` beams, each up to max_tokens: `n` covers it. `echo`
    and `prompt_logprobs` add nothing to what vLLM reports in usage, which is what is billed."""
    asked = max_tokens(payload, kind)
    n = _positive_count(payload, "n", MAX_CHOICES)
    if kind == "chat":
        bound, chars = _chat_prompt(payload)
        return Work(bound + _body_bytes(raw), 1, n, DEFAULT_COMPLETION_RESERVE if asked is None else asked,
                    asked is not None, chars // CHARS_PER_TOKEN + 1)
    prompts = prompt_count(payload)
    bound = _body_bytes(raw) + PROMPT_TOKENS * prompts
    suffix = payload.get("suffix")
    if isinstance(suffix, str) and prompts > 1:  # fill-in-the-middle renders it into every prompt
        bound += len(suffix.encode("utf-8", "surrogatepass")) * (prompts - 1)
    return Work(bound, prompts, _best_of(payload, n), COMPLETIONS_DEFAULT_MAX_TOKENS if asked is None else asked,
                asked is not None, _text_length(payload.get("prompt")) // CHARS_PER_TOKEN + 1)


def _best_of(payload: dict, n: int) -> int:
    """Completions' `best_of` generates that many choices and returns `n` of them; it must be >= n."""
    best_of = payload.get("best_of")
    if best_of is None:
        return n
    best_of = _positive_count(payload, "best_of", MAX_CHOICES)
    if best_of < n:
        raise errors.bad_request("invalid_best_of", "'best_of' must be at least 'n'.")
    return best_of


def _positive_count(payload: dict, name: str, most: int) -> int:
    value = payload.get(name)
    if value is None:
        return 1
    if type(value) is not int or not 1 <= value <= most:  # bool is an int: type(), not isinstance
        raise errors.bad_request(f"invalid_{name}", f"'{name}' must be an integer from 1 to {most}.")
    return value


def prompt_count(payload: dict) -> int:
    """How many prompts a completions request holds (each gets its own choices); 400 past MAX_PROMPTS."""
    prompt = payload.get("prompt")
    if not isinstance(prompt, list) or not prompt or not isinstance(prompt[0], (str, list)):
        return 1  # a string, or one prompt of token ids
    if len(prompt) > MAX_PROMPTS:
        raise errors.bad_request("invalid_prompt", f"A request may hold at most {MAX_PROMPTS} prompts.")
    return len(prompt)


def _body_bytes(raw: bytes) -> int:
    """At least the UTF-8 bytes of every text the body holds: every token of a prompt comes from
    them or from the template. JSON escapes only lengthen text, and a token id takes two bytes
    (a digit and a comma); a byte-level BPE never makes more tokens than a text has bytes."""
    if raw[:1] != b"{" and json.detect_encoding(raw) != "utf-8":
        return len(raw) * 3 // 2  # UTF-16 has 2 bytes per code unit, UTF-8 at most 3 (UTF-32: 4 for 4)
    return len(raw)


def _chat_prompt(payload: dict) -> tuple[int, int]:
    """Chat tokens beyond the body's bytes (the template's, non-text parts, fields a template may
    render again, pretty-printed), and the characters of text; one pass over the messages."""
    messages = payload["messages"]
    tokens, chars = CHAT_REQUEST_TOKENS + CHAT_MESSAGE_TOKENS * len(messages), 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") in (None, "text"):
                    chars += _text_length(part.get("text"))
                else:
                    tokens += NON_TEXT_PART_TOKENS
    for name in _RENDERED_AGAIN:
        if payload.get(name):
            tokens += len(_encode({name: payload[name]}).encode("utf-8", "surrogatepass"))
    return tokens, chars


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


def wants_continuous_usage(payload: dict) -> bool:
    """Did the client ask for usage on every chunk of its stream (vLLM's continuous_usage_stats)?"""
    options = payload.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage")) and \
        bool(options.get("continuous_usage_stats"))


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


# What vLLM reads as text from a content part, by type (gateway.pipeline.request_checks.PART_SHAPES).
_TEXT_PART_KEYS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal",
                   "thinking": "thinking"}
