"""Hypothesis strategies for request bodies as clients (and careless or hostile ones) send them.

JSON of any shape around the fields the gateway and vLLM know; then bytes: UTF-8, ASCII-escaped,
BOMs, UTF-16/32, lone surrogates (escaped and encoded), deep nesting, duplicate keys, NaN and
Infinity, huge numbers, stray bytes, truncation. Shared by the parser fuzz
(tests/gateway/test_payload_fuzz.py) and the in-process gateway fuzz (tests/gateway_app/).
"""
from __future__ import annotations

import json

from hypothesis import strategies as st

# OpenAI's chat roles, and the content part types vLLM 0.32 reads (vllm/renderers/chat_utils.py)
# with the key each reads.
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
PART_TYPES = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal",
              "thinking": "thinking", "tool_reference": "name", "image_url": "image_url", "input_image": "image_url",
              "audio_url": "audio_url", "video_url": "video_url", "input_audio": "input_audio",
              "image_embeds": "image_embeds", "audio_embeds": "audio_embeds", "video_embeds": "video_embeds",
              "prompt_embeds": "data"}

# Top-level fields of OpenAI's and vLLM 0.32's completions and chat requests, and removed ones.
FIELD_NAMES = (
    "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "max_tokens", "max_completion_tokens", "n",
    "presence_penalty", "response_format", "seed", "stop", "stream", "stream_options", "temperature", "top_p",
    "tools", "tool_choice", "parallel_tool_calls", "user", "suffix", "echo", "best_of", "functions",
    "function_call", "metadata", "store", "reasoning_effort", "top_k", "min_p", "repetition_penalty",
    "length_penalty", "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "min_tokens",
    "skip_special_tokens", "truncate_prompt_tokens", "prompt_logprobs", "allowed_token_ids", "bad_words",
    "prompt_embeds", "add_special_tokens", "structured_outputs", "priority", "request_id", "session_id",
    "cache_salt", "kv_transfer_params", "vllm_xargs", "chat_template", "chat_template_kwargs", "documents",
    "mm_processor_kwargs", "add_generation_prompt", "continue_final_message", "guided_json", "guided_regex",
    "guided_choice", "guided_grammar", "return_tokens_as_token_ids", "thinking_token_budget",
)
MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id", "function_call", "reasoning",
                  "reasoning_content", "refusal", "audio", "tools", "task")
PART_KEYS = tuple(sorted({"type", "text", "uuid", *PART_TYPES.values()}))

_characters = st.one_of(st.characters(), st.characters(categories=["Cs"]))  # lone surrogates too
texts = st.text(_characters, max_size=24)
_numbers = st.one_of(st.integers(min_value=-(2 ** 70), max_value=2 ** 70), st.integers(0, 5),
                     st.floats(allow_nan=True, allow_infinity=True))
_leaves = st.one_of(st.none(), st.booleans(), _numbers, texts)
_keys = st.one_of(texts, st.sampled_from(["password", "api_key", "clientSecret", "aws_secret_access_key", "token"]))
_secretish = st.text("abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789#!", min_size=12, max_size=40)
values = st.recursive(st.one_of(_leaves, _secretish),
                      lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=4)),
                      max_leaves=12)


def _sometimes(known, other=values):
    return st.one_of(known, other)


_parts = st.one_of(
    texts,
    st.fixed_dictionaries({"type": _sometimes(st.sampled_from(sorted(PART_TYPES)))},
                          optional={key: _sometimes(texts | st.fixed_dictionaries({"url": texts})) for key in PART_KEYS
                                    if key != "type"}),
    values)
_messages = st.lists(_sometimes(st.fixed_dictionaries(
    {"role": _sometimes(st.sampled_from(ROLES))},
    optional={"content": st.one_of(texts, st.lists(_parts, max_size=3), values),
              **{name: values for name in MESSAGE_FIELDS[2:]}})), min_size=0, max_size=3)
_extras = st.dictionaries(st.one_of(st.sampled_from(FIELD_NAMES), texts), values, max_size=4)
_model = _sometimes(st.just("sim-coder"), texts)


def _with_extras(required: dict) -> st.SearchStrategy:
    return st.tuples(st.fixed_dictionaries(required), _extras).map(lambda pair: {**pair[1], **pair[0]}
                                                                  if len(pair[1]) % 2 else {**pair[0], **pair[1]})


completion_bodies = _with_extras(
    {"model": _model, "prompt": _sometimes(texts | st.lists(texts | st.integers(0, 50_000), max_size=4))})
chat_bodies = _with_extras({"model": _model, "messages": _sometimes(_messages)})


_LITERALS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" * 5000, "1" * 4000, "-0", "1.5e-400",
             "0.0000001", "[]", "{}", '"\\u0000"', '"\\ud800"', '"\\udfff\\ud800"', '"\\ud83d\\ude00"']
_ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le"]


@st.composite
def raw_bodies(draw, bodies) -> bytes:
    """A body as bytes, in one of the many forms a client (or a fuzzer) sends."""
    text = json.dumps(draw(bodies), ensure_ascii=draw(st.booleans()), allow_nan=True)
    form = draw(st.sampled_from(["plain", "nested", "duplicate", "literal", "whitespace", "encoding", "bytes"]))
    if form == "nested":
        depth = draw(st.sampled_from([1, 10, 63, 64, 65, 100, 899, 900, 901, 3000, 50_000]))
        opener = draw(st.sampled_from(["[", '{"a":']))
        closer = "]" if opener == "[" else "}"
        text = text[:-1] + (", " if len(text) > 2 else "") + '"deep": ' + opener * depth + "0" + closer * depth + "}"
    elif form == "duplicate":
        name = draw(st.sampled_from(["model", "prompt", "messages", "stream", "max_tokens"]))
        text = "{" + json.dumps(name) + ": " + json.dumps(draw(values), allow_nan=True) + ", " + text[1:]
    elif form == "literal" and len(text) > 2:
        text = text[:-1] + ', "x": ' + draw(st.sampled_from(_LITERALS)) + "}"
    elif form == "whitespace":
        text = draw(st.sampled_from(["", " ", "\n", "\t\r\n"])) + text + draw(st.sampled_from(["", " ", "\n", "\x0b"]))
    encoding = draw(st.sampled_from(_ENCODINGS)) if form == "encoding" else "utf-8"
    raw = text.encode(encoding, "surrogatepass")
    if form == "bytes":
        at = draw(st.integers(0, len(raw)))
        cut = draw(st.sampled_from(["insert", "truncate", "replace"]))
        junk = draw(st.binary(min_size=1, max_size=4))
        raw = raw[:at] + junk + raw[at:] if cut == "insert" else raw[:at] if cut == "truncate" else \
            raw[:at] + junk + raw[at + len(junk):]
    return raw


def is_openai_error(body: bytes, status: int) -> bool:
    """`{"error": {"message": str, "type": str, "code": ...}}` with the type OpenAI uses for the status."""
    error = json.loads(body)["error"]
    return isinstance(error["message"], str) and isinstance(error["type"], str) and "code" in error
