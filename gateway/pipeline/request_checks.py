"""Checks on a parsed request body that the gateway's own code and promises depend on.

The engine validates sampling parameters (its 400s are relayed). These come first because the
gateway itself walks, hashes, stores and forwards the body: every string must be Unicode text (a
lone surrogate can be neither encoded, hashed nor stored), nesting is bounded (the walks after
this are recursive), and chat roles and content parts are the ones vLLM 0.32 reads, each with its
documented shape — so a field that names something can hold nothing else, a secret least of all,
and every text a part carries is a string. Each failure is a 400 naming the field, never echoing
its value.
"""
from __future__ import annotations

import re
from typing import Iterable

from gateway import errors
from gateway.pipeline.redaction import (
    MIN_MEMBER_VALUE,
    MIN_SECRET_CHARS,
    PLAIN_KEYS,
    member_text,
    numbers_only,
    secret_named,
)

MAX_NESTING = 64  # objects and arrays within each other; JSON schemas in response_format stay far below
# The roles of OpenAI's chat schema; vLLM would render any string as a role, so a secret too.
CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # json pairs escaped surrogates: any left is alone
_NUMBERS = (int, float, bool)


def too_deep() -> errors.GatewayError:
    return errors.bad_request("invalid_json",
                              f"The request body nests objects and arrays deeper than {MAX_NESTING} levels.")


def _lone_surrogate() -> errors.GatewayError:
    return errors.bad_request("invalid_json", "The request body holds a lone UTF-16 surrogate (such as \\ud800), "
                                              "which is not text; send each character whole.")


def check_values(value: dict | list, texts: list[str], depth: int = 1) -> None:
    """Every string (keys included) is text, and containers nest at most MAX_NESTING deep.

    Adds to `texts` every string long enough to hold a secret, and each secret-named member as an
    assignment, for redaction to look at without walking the body again
    (gateway.pipeline.redaction.redact_body).
    """
    if depth > MAX_NESTING:
        raise too_deep()
    if type(value) is dict:
        for key in value:  # isascii() is O(1) on str: only the rare non-ASCII text is searched
            if not key.isascii() and _LONE_SURROGATE.search(key):
                raise _lone_surrogate()
            if len(key) >= MIN_SECRET_CHARS:
                texts.append(key)
            if key not in PLAIN_KEYS and secret_named(key):  # {"password": "..."}: read as an assignment too
                member = value[key]
                if type(member) is str and len(member) >= MIN_MEMBER_VALUE:
                    texts.append(member_text(key, member))
        items: Iterable = value.values()
    elif len(value) > 8 and type(value[0]) in _NUMBERS and numbers_only(value):
        return
    else:
        items = value
    for item in items:  # inline, not a function per string: this runs for every value of every body
        kind = type(item)
        if kind is str:
            if not item.isascii() and _LONE_SURROGATE.search(item):
                raise _lone_surrogate()
            if len(item) >= MIN_SECRET_CHARS:
                texts.append(item)
        elif kind is dict or kind is list:
            check_values(item, texts, depth + 1)


def check_messages(messages) -> None:
    """A non-empty list of message objects, each with a known role and content vLLM can read."""
    if type(messages) is not list or not messages:
        raise errors.bad_request("invalid_messages", "'messages' must be a non-empty list of objects.")
    for i, message in enumerate(messages):
        if type(message) is not dict:
            raise errors.bad_request("invalid_messages", "'messages' must be a non-empty list of objects.")
        role = message.get("role")
        if type(role) is not str or role not in CHAT_ROLES:
            raise errors.bad_request("invalid_role",
                                     f"messages[{i}].role must be one of {', '.join(sorted(CHAT_ROLES))}.")
        content = message.get("content")
        if content is None or type(content) is str:
            continue
        if type(content) is not list:
            raise errors.bad_request("invalid_content",
                                     f"messages[{i}].content must be a string, a list of parts or null.")
        for j, part in enumerate(content):
            if type(part) is not str:
                _check_part(part, f"messages[{i}].content[{j}]")


# Content part types vLLM 0.32 reads (vllm/renderers/chat_utils.py, MM_PARSER_MAP) and the key each
# reads with the JSON type it must have: a text key holds a string, a media URL {"url": "..."}.
_STRING, _URL, _AUDIO, _EMBEDS = "a string", 'an object with a "url" string', \
    'an object with "data" and "format" strings', "a string or an object"
PART_SHAPES = {
    "text": ("text", _STRING), "input_text": ("text", _STRING), "output_text": ("text", _STRING),
    "refusal": ("refusal", _STRING), "thinking": ("thinking", _STRING), "tool_reference": ("name", _STRING),
    "image_url": ("image_url", _URL), "input_image": ("image_url", _STRING), "audio_url": ("audio_url", _URL),
    "video_url": ("video_url", _URL), "input_audio": ("input_audio", _AUDIO),
    "image_embeds": ("image_embeds", _EMBEDS), "audio_embeds": ("audio_embeds", _EMBEDS),
    "video_embeds": ("video_embeds", _EMBEDS), "prompt_embeds": ("data", _STRING),
}
# A part without "type": vLLM looks for one of these keys (a URL may then be a bare string).
_TYPELESS = ("image_url", "image_embeds", "audio_embeds", "video_embeds", "audio_url", "input_audio", "video_url")


def _check_part(part, where: str) -> None:
    if type(part) is not dict:
        raise errors.bad_request("invalid_content_part", f"{where} must be a string or an object.")
    text = part.get("text")
    if text is not None and type(text) is not str:  # whatever the type: every reader takes it as text
        raise errors.bad_request("invalid_content_part", f"{where}.text must be a string.")
    kind = part.get("type")
    if kind is None:
        return _check_typeless(part, where)
    if type(kind) is not str or kind not in PART_SHAPES:
        raise errors.bad_request("invalid_content_part",
                                 f"{where}.type must be one of {', '.join(sorted(PART_SHAPES))}.")
    key, shape = PART_SHAPES[kind]
    if not _has_shape(part.get(key), shape):
        raise errors.bad_request("invalid_content_part", f"{where}.{key} must be {shape} for a '{kind}' part.")


def _check_typeless(part: dict, where: str) -> None:
    key = next((k for k in _TYPELESS if k in part), None)
    if key is None:
        raise errors.bad_request("invalid_content_part", f"{where} needs a 'type'.")
    shape = PART_SHAPES[key][1]
    value = part[key]
    if not (_has_shape(value, shape) or (shape is _URL and type(value) is str) or (shape is _EMBEDS and value is None)):
        raise errors.bad_request("invalid_content_part", f"{where}.{key} must be {shape}.")


def _has_shape(value, shape: str) -> bool:
    if shape is _STRING:
        return type(value) is str
    if shape is _URL:
        return type(value) is dict and type(value.get("url")) is str
    if shape is _AUDIO:
        return type(value) is dict and type(value.get("data")) is str and type(value.get("format")) is str
    return type(value) is str or type(value) is dict  # embeddings: base64, or tensors by name


def check_stream_options(payload: dict) -> None:
    options = payload.get("stream_options")
    if options is not None and type(options) is not dict:
        raise errors.bad_request("invalid_stream_options", "'stream_options' must be an object.")
