"""Request validation and vLLM/OpenAI response shapes (JSON in, bytes out)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any, Optional, overload

from .config import SimulatorConfig
from .tokenizer import render_chat, tokenize

DEFAULT_MAX_TOKENS = 16
MAX_PROMPTS = 1024  # vLLM's VLLM_MAX_COMPLETION_PROMPTS default
MAX_SEQUENCES = 16384  # vLLM's VLLM_MAX_N_SEQUENCES default

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
# What ``_dumps`` does for a str, without its method dispatch.
_string = encode_basestring

# HTTP status -> vLLM's ``error.type`` string (vllm/entrypoints/serve/exception_handling/error_response.py).
ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError",
               503: "Service Unavailable"}
# What FastAPI's request validation (pydantic) failures get instead: the status's phrase.
VALIDATION_TYPE = "Bad Request"
# vllm.exceptions.QueueOverflowError and GenerationError, word for word.
QUEUE_FULL = ("The engine is currently busy and cannot accept new requests. Please try again later or on a "
              "different instance.")
GENERATION_FAILED = "Internal server error"


def dumps(obj: Any) -> bytes:
    """Compact JSON encoding to UTF-8 bytes."""
    return _dumps(obj).encode()


class ProtocolError(Exception):
    """A client error that maps to a vLLM-style error response (type and param as vLLM sets them)."""

    def __init__(self, message: str, status: int = 400, err_type: Optional[str] = None,
                 param: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param

    def body(self) -> bytes:
        return error_body(self.message, self.status, self.err_type, self.param)


def invalid(name: str, message: str, value: Any) -> ProtocolError:
    """vLLM's VLLMValidationError: its message ends with the parameter and value, `param` names it."""
    return ProtocolError(f"{message} (parameter={name}, value={value})", param=name)


def not_valid_type(name: str, expected: str, value: Any) -> ProtocolError:
    """A field of the wrong type: FastAPI's validation error, as vLLM's handler words it."""
    kind = {"integer": "int_type", "object": "dict_type"}.get(expected, "value_error")
    return ProtocolError(f"1 validation error:\n  {{'type': '{kind}', 'loc': ('body', '{name}'), "
                         f"'msg': 'Input should be a valid {expected}', 'input': {value!r}}}",
                         err_type=VALIDATION_TYPE, param=f"body.{name}")


def error_body(message: str, status: int, err_type: Optional[str] = None, param: Optional[str] = None) -> bytes:
    """vLLM's current ErrorResponse shape: ``{"error": {message,type,param,code}}``."""
    err_type = err_type or ERROR_TYPES.get(status, "BadRequestError")
    return dumps({"error": {"message": message, "type": err_type, "param": param, "code": status}})


def stream_error_event(message: str = GENERATION_FAILED, status: int = 500) -> str:
    """The event vLLM ends a failed stream with (create_streaming_error_response), before [DONE]."""
    return "data: " + json.dumps(json.loads(error_body(message, status))) + "\n\n"


@dataclass(slots=True)
class GenerationParams:
    """Validated generation request, independent of the endpoint it came from."""

    chat: bool
    prompt_tokens: list  # the first prompt (most requests have only one)
    max_tokens: int
    stream: bool
    include_usage: bool
    priority: int
    cache_salt: Optional[str]
    seed: Optional[int]
    ignore_eos: bool
    prompts: Optional[list] = None  # every prompt of a completions batch; None: just ``prompt_tokens``
    n: int = 1  # choices per prompt (``n``; with ``use_beam_search`` the beam width)
    continuous_usage: bool = False  # stream_options.continuous_usage_stats (with include_usage)

    @property
    def all_prompts(self) -> list:
        """Every prompt's tokens, in order."""
        return self.prompts if self.prompts is not None else [self.prompt_tokens]

    @property
    def sequences(self) -> int:
        """Sequences the engine generates: ``n`` for each prompt."""
        return len(self.all_prompts) * self.n


_decode = json.JSONDecoder().decode


def _loads(raw: bytes) -> Any:
    """``json.loads(raw)``, skipping its encoding sniffing for the usual UTF-8 object body."""
    if raw[:1] == b"{" and raw[1:2] not in (b"", b"\x00"):
        # What json.detect_encoding answers for such a body, decoded the way json.loads does.
        return _decode(raw.decode("utf-8", "surrogatepass"))
    return json.loads(raw)


def parse_json(raw: bytes) -> dict:
    """Decode a request body that must be a JSON object."""
    try:
        body = _loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"Invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise ProtocolError("Request body must be a JSON object")
    return body


@overload
def _opt_int(body: dict, name: str, default: int, minimum: Optional[int] = None) -> int: ...
@overload
def _opt_int(body: dict, name: str, default: None, minimum: Optional[int] = None) -> Optional[int]: ...
def _opt_int(body: dict, name: str, default: Optional[int], minimum: Optional[int] = None) -> Optional[int]:
    """Read an optional integer field (bools are not integers here)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise not_valid_type(name, "integer", value)
    if minimum is not None and value < minimum:
        raise invalid(name, f"{name} must be at least {minimum}, got {value}.", value)
    return value


def _completion_prompts(body: dict) -> list:
    """Tokenize a completions ``prompt``: text, token ids, or a batch of either (vLLM's four shapes)."""
    prompt = body.get("prompt")
    if prompt is None:
        raise ProtocolError("Either 'prompt' or 'prompt_embeds' must be provided")
    if isinstance(prompt, str):
        prompts = [tokenize(prompt)]
    elif isinstance(prompt, list) and prompt and all(_is_token_id(t) for t in prompt):
        prompts = [list(prompt)]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = [tokenize(p) for p in prompt]
    elif isinstance(prompt, list) and prompt and all(
            isinstance(p, list) and all(_is_token_id(t) for t in p) for p in prompt):
        prompts = [list(p) for p in prompt]
    else:
        raise ProtocolError("'prompt' must be a string, a list of token ids, or a list of either")
    if len(prompts) > MAX_PROMPTS:
        raise ProtocolError(f"prompt list length {len(prompts)} exceeds the maximum allowed count of {MAX_PROMPTS}.")
    if not all(prompts):
        raise ProtocolError("Prompt cannot be empty")
    return prompts


def _is_token_id(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _chat_tokens(body: dict) -> list:
    """Render and tokenize chat ``messages``."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ProtocolError("'messages' must be a non-empty list")
    if not all(isinstance(m, dict) for m in messages):
        raise ProtocolError("Every message must be an object")
    try:
        return tokenize(render_chat(messages))
    except TypeError as exc:
        raise ProtocolError(str(exc)) from None


def _check_model(body: dict, config: SimulatorConfig) -> None:
    """404 unless ``model`` is absent or equals the served name (like vLLM)."""
    model = body.get("model")
    if model is not None and model != config.served_model_name:
        raise ProtocolError(f"The model `{model}` does not exist. Valid aliases: {config.served_model_name}.", 404,
                            "NotFoundError", "model")


def _check_scheduling(body: dict, config: SimulatorConfig) -> tuple[int, Optional[str]]:
    """Validate ``priority`` and ``cache_salt`` the way vLLM does."""
    priority = _opt_int(body, "priority", 0)
    if priority != 0 and config.scheduling_policy != "priority":
        raise ProtocolError(f"Got priority {priority} but Priority scheduling is not enabled.")
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise ProtocolError("Parameter 'cache_salt' must be a non-empty string if provided.", param="cache_salt")
    return priority, salt


def _stream_flags(body: dict) -> tuple[bool, bool, bool]:
    """Return (stream, include_usage, continuous usage: usage on every chunk too)."""
    stream = bool(body.get("stream", False))
    options = body.get("stream_options")
    if options is None:
        return stream, False, False
    if not stream:
        raise ProtocolError("Stream options can only be defined when `stream=True`.", param="stream_options")
    if not isinstance(options, dict):
        raise not_valid_type("stream_options", "object", options)
    include = bool(options.get("include_usage", False))
    # As in vLLM: continuous usage stats only come with include_usage.
    return stream, include, include and bool(options.get("continuous_usage_stats", False))


def _max_tokens(body: dict, chat: bool) -> tuple[str, int]:
    """(field, value) in vLLM's order: chat prefers ``max_completion_tokens``; completions know only ``max_tokens``."""
    value = _opt_int(body, "max_completion_tokens", None, 1) if chat else None
    if value is not None:
        return "max_completion_tokens", value
    value = _opt_int(body, "max_tokens", None, 1)
    return "max_tokens", DEFAULT_MAX_TOKENS if value is None else value


def _choices(body: dict, stream: bool, sequences_per_choice: int) -> int:
    """``n`` (the beam width under ``use_beam_search``, which vLLM cannot stream); ``best_of`` is ignored, as in
    vLLM."""
    n = _opt_int(body, "n", 1, 1)
    if body.get("use_beam_search") and stream:
        raise ProtocolError("Streaming is not currently supported with beam search")
    if n * sequences_per_choice > MAX_SEQUENCES:
        raise invalid("n", f"The request asks for {n * sequences_per_choice} sequences; at most {MAX_SEQUENCES}.", n)
    return n


def parse_request(body: dict, chat: bool, config: SimulatorConfig, max_len: int) -> GenerationParams:
    """Validate a (chat) completions request body into GenerationParams."""
    _check_model(body, config)
    prompts = [_chat_tokens(body)] if chat else _completion_prompts(body)
    field, max_tokens = _max_tokens(body, chat)
    stream, include_usage, continuous = _stream_flags(body)
    n = _choices(body, stream, len(prompts))
    # vLLM clamps each prompt's length on its own; one length for the batch here: the shortest room.
    max_tokens = min(_fit_context(tokens, max_tokens, field, max_len) for tokens in prompts)
    priority, salt = _check_scheduling(body, config)
    return GenerationParams(chat, prompts[0], max_tokens, stream, include_usage, priority, salt,
                            _opt_int(body, "seed", None), bool(body.get("ignore_eos", False)),
                            prompts if len(prompts) > 1 else None, n, continuous)


def _fit_context(tokens: list, max_tokens: int, field: str, max_len: int) -> int:
    """vLLM 0.32's context rules: a prompt with no room for a token, or `max_tokens` past the context,
    is a 400 (vllm/renderers/params.py); otherwise `max_tokens` is clamped to what fits (get_max_tokens)."""
    if max_tokens > max_len:
        raise invalid(field, f"{field}={max_tokens} cannot be greater than max_model_len={max_len}. "
                             "Please request fewer output tokens.", max_tokens)
    if len(tokens) >= max_len:
        raise invalid("input_tokens", f"This model's maximum context length is {max_len} tokens. However, your "
                                      f"prompt contains {len(tokens)} input tokens, which exceeds this limit even "
                                      "without any output tokens. Please reduce the length of the input prompt.",
                      len(tokens))
    return min(max_tokens, max_len - len(tokens))


# ---------------------------------------------------------------- responses
def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict:
    """OpenAI usage object with vLLM's prompt_tokens_details."""
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


# The non-streaming bodies are fixed shapes, so they are filled into templates
# instead of going through JSONEncoder (whose per-call set-up costs more than
# the encoding).  The bytes are exactly what ``dumps`` of the equivalent dict gives.
_USAGE = ('{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,'
          '"prompt_tokens_details":{"cached_tokens":%d}}')
_COMPLETION = ('{"id":%s,"object":"text_completion","created":%d,"model":%s,"choices":[{"index":0,'
               '"text":%s,"logprobs":null,"finish_reason":%s,"stop_reason":null,"prompt_logprobs":null}],'
               '"service_tier":null,"system_fingerprint":null,"usage":%s,"kv_transfer_params":null}')
_CHAT = ('{"id":%s,"object":"chat.completion","created":%d,"model":%s,"choices":[{"index":0,'
         '"message":{"role":"assistant","content":%s,"refusal":null,"annotations":null,"audio":null,'
         '"function_call":null,"tool_calls":[],"reasoning_content":null},"logprobs":null,'
         '"finish_reason":%s,"stop_reason":null}],"service_tier":null,"system_fingerprint":null,'
         '"usage":%s,"prompt_logprobs":null,"kv_transfer_params":null}')


def usage_json(use: dict) -> str:
    """A usage object from ``usage()`` as compact JSON."""
    return _USAGE % (use["prompt_tokens"], use["total_tokens"], use["completion_tokens"],
                     use["prompt_tokens_details"]["cached_tokens"])


def completion_response(rid: str, created: int, model: str, text: str, finish: str, use: dict) -> bytes:
    """Non-streaming /v1/completions body."""
    return (_COMPLETION % (_string(rid), created, _string(model), _string(text), _string(finish),
                           usage_json(use))).encode()


def chat_response(rid: str, created: int, model: str, text: str, finish: str, use: dict) -> bytes:
    """Non-streaming /v1/chat/completions body."""
    return (_CHAT % (_string(rid), created, _string(model), _string(text), _string(finish),
                     usage_json(use))).encode()


def _running_usage(use: dict) -> str:
    """A chunk's continuous usage as vLLM writes it (no prompt_tokens_details)."""
    return '{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (
        use["prompt_tokens"], use["total_tokens"], use["completion_tokens"])


def choices_response(params: GenerationParams, rid: str, created: int, model: str, outputs: list,
                     use: dict) -> bytes:
    """A non-streaming body with several choices; ``outputs`` holds (text, finish reason) in index order."""
    if params.chat:
        choices = [{"index": i, "message": {"role": "assistant", "content": text, "refusal": None, "annotations": None,
                                            "audio": None, "function_call": None, "tool_calls": [],
                                            "reasoning_content": None},
                    "logprobs": None, "finish_reason": finish, "stop_reason": None}
                   for i, (text, finish) in enumerate(outputs)]
        return dumps({"id": rid, "object": "chat.completion", "created": created, "model": model, "choices": choices,
                      "service_tier": None, "system_fingerprint": None, "usage": use, "prompt_logprobs": None,
                      "kv_transfer_params": None})
    choices = [{"index": i, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None,
                "prompt_logprobs": None} for i, (text, finish) in enumerate(outputs)]
    return dumps({"id": rid, "object": "text_completion", "created": created, "model": model, "choices": choices,
                  "service_tier": None, "system_fingerprint": None, "usage": use, "kv_transfer_params": None})


class StreamEncoder:
    """Builds SSE chunks from pre-rendered JSON fragments (hot path: one dumps per token)."""

    __slots__ = ("chat", "head", "obj")

    def __init__(self, chat: bool, rid: str, created: int, model: str) -> None:
        self.chat = chat
        self.obj = "chat.completion.chunk" if chat else "text_completion"
        self.head = ('data: {"id":%s,"object":"%s","created":%d,"model":%s,"choices":'
                     % (json.dumps(rid), self.obj, created, json.dumps(model)))

    def role_chunk(self) -> str:
        """First chat chunk announcing the assistant role (vLLM sends it too)."""
        return (self.head + '[{"index":0,"delta":{"role":"assistant","content":""},'
                '"logprobs":null,"finish_reason":null}]}\n\n')

    def token_chunk(self, text: str, finish: Optional[str] = None) -> str:
        """One chunk carrying ``text``; ``finish`` set on the last one."""
        fin = "null" if finish is None else '"%s"' % finish
        if self.chat:
            return (self.head + '[{"index":0,"delta":{"content":%s},"logprobs":null,'
                    '"finish_reason":%s,"stop_reason":null}]}\n\n' % (json.dumps(text), fin))
        return (self.head + '[{"index":0,"text":%s,"logprobs":null,"finish_reason":%s,'
                '"stop_reason":null}]}\n\n' % (json.dumps(text), fin))

    def choice_chunk(self, index: int, text: str, finish: Optional[str] = None,
                     use: Optional[dict] = None) -> str:
        """A chunk for choice ``index`` (several choices or prompts), with usage when streamed continuously.

        As vLLM does with ``continuous_usage_stats``: ``use`` is that choice's prompt and its
        completion tokens so far, not the request's totals."""
        fin = "null" if finish is None else '"%s"' % finish
        if self.chat:
            choice = '{"index":%d,"delta":{"content":%s},"logprobs":null,"finish_reason":%s,"stop_reason":null}'
        else:
            choice = '{"index":%d,"text":%s,"logprobs":null,"finish_reason":%s,"stop_reason":null}'
        tail = "}\n\n" if use is None else ',"usage":' + _running_usage(use) + "}\n\n"
        return self.head + "[" + choice % (index, json.dumps(text), fin) + "]" + tail

    def indexed_role_chunk(self, index: int, use: Optional[dict] = None) -> str:
        """The role chunk of choice ``index`` (vLLM sends one per choice before any token)."""
        tail = "}\n\n" if use is None else ',"usage":' + _running_usage(use) + "}\n\n"
        return (self.head + '[{"index":%d,"delta":{"role":"assistant","content":""},"logprobs":null,'
                '"finish_reason":null}]' % index + tail)

    def usage_chunk(self, use: dict) -> str:
        """Final ``choices: []`` chunk carrying usage (stream_options.include_usage)."""
        return self.head + '[],"usage":' + usage_json(use) + "}\n\n"

    @staticmethod
    def done() -> str:
        """SSE terminator."""
        return "data: [DONE]\n\n"
