"""Request bodies: parsed like json.loads would, checked, and re-encoded for the engine."""
import json

import pytest

from gateway.errors import GatewayError
from gateway.payload import json_object, parse_payload, upstream_body

PROMPT = {"model": "m", "prompt": "def f():\n    return 'é ✓ \\u2028'", "max_tokens": 16}


def error_code(body, kind="completions"):
    with pytest.raises(GatewayError) as caught:
        parse_payload(body, kind)
    return caught.value.code


@pytest.mark.parametrize("body", [
    json.dumps(PROMPT).encode(), json.dumps(PROMPT, ensure_ascii=False).encode(),
    b'{"model": "m", "prompt": "x"}  \r\n\t', b' \n{"model": "m", "prompt": "x"}',
    json.dumps(PROMPT).encode("utf-16-le"), json.dumps(PROMPT).encode("utf-8-sig"),
    b'{"model": "m", "prompt": "x", "temperature": NaN}', b'{"model": "m", "prompt": "x", "a": {"b": [1, 2.5]}}',
])
def test_valid_bodies_parse_as_json_loads_does(body):
    assert parse_payload(body, "completions") == json.loads(body)


@pytest.mark.parametrize("body", [
    b'{"model": "m", "prompt": "x"} {}', b'{"model": "m", "prompt": "x"}\x0b', b'{"model": "m"', b"{",
    b'{"model": "m", "prompt": "\xff"}', b"", b"nul", b'{"model": "m", "prompt": "x"}\xe2\x80\xa8',
])
def test_malformed_json_is_invalid_json(body):
    assert error_code(body) == "invalid_json"


def test_shapes_and_fields_are_checked():
    assert error_code(b'[{"model": "m"}]') == "invalid_body"
    assert error_code(b'{"prompt": "x"}') == "missing_model"
    assert error_code(b'{"model": "m", "prompt": 3}') == "invalid_prompt"
    assert error_code(b'{"model": "m", "messages": []}', "chat") == "invalid_messages"
    assert error_code(b'{"model": "m", "prompt": "x", "stream": 1}') == "invalid_stream"
    for value in (b"true", b"0", b"1.5", b'"8"'):
        assert error_code(b'{"model": "m", "prompt": "x", "max_tokens": %s}' % value) == "invalid_max_tokens"
    assert parse_payload(b'{"model": "m", "prompt": "x", "stream": false, "max_completion_tokens": 1}', "completions")


def test_json_object_is_shared_with_other_endpoints():
    assert json_object(b'{"a": 1}') == {"a": 1}


def test_upstream_body_is_compact_unescaped_json_with_salt_usage_and_priority():
    body = {**PROMPT, "stream": True, "priority": 99, "cache_salt": "mine"}
    out = upstream_body(body, salt="t1", priority=10)
    expected = {**PROMPT, "stream": True, "cache_salt": "t1:mine", "stream_options": {"include_usage": True},
                "priority": 10}
    assert out == json.dumps(expected, separators=(",", ":"), ensure_ascii=False).encode()
    assert upstream_body(PROMPT, salt=None, priority=None) == json.dumps(PROMPT, separators=(",", ":"),
                                                                           ensure_ascii=False).encode()


def test_upstream_body_still_refuses_what_json_cannot_say():
    with pytest.raises(TypeError):
        upstream_body({**PROMPT, "x": object()}, salt=None, priority=None)
    assert upstream_body(PROMPT, salt=None, priority=None)  # and works again afterwards
