"""Request bodies: parsed like json.loads would, checked, and re-encoded for the engine."""
import json

import pytest

from gateway.errors import GatewayError
from gateway.pipeline.payload import json_object, parse_payload, upstream_body

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


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
SECRET = "sy_live_" + "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5hJ"  # a Switchyard key's shape


def chat_error(messages) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        parse_payload(json.dumps({"model": "m", "messages": messages}).encode(), "chat")
    return caught.value


@pytest.mark.parametrize("body", [
    b'{"model": "m", "prompt": "a\\ud800b"}', b'{"model": "m", "prompt": "\\uDFFF"}',
    b'{"model": "m", "prompt": "x", "stop": ["\\ud83d"]}', b'{"model": "m", "prompt": "x", "k\\udc00": 1}',
    b'{"model": "m", "prompt": "x", "a": {"b": [{"c": "\\ude00\\ud83d"}]}}',  # low then high: no pair
    b'{"model": "m\\ud800", "prompt": "x"}',
    b'{"model": "m", "prompt": "a\xed\xa0\x80b"}', b' {"model": "m", "prompt": "a\xed\xa0\x80b"}',
    '{"model": "m", "prompt": "a\ud800b"}'.encode("utf-16-le", "surrogatepass"),
    '{"model": "m", "prompt": "a\udc00b"}'.encode("utf-16", "surrogatepass"),
])
def test_a_lone_surrogate_anywhere_is_invalid_json(body):
    assert error_code(body) == "invalid_json"


def test_surrogate_pairs_are_characters_and_parse():
    assert parse_payload(b'{"model": "m", "prompt": "\\ud83d\\ude00 \\u00e9"}', "completions")["prompt"] == "😀 é"


@pytest.mark.parametrize("depth", [65, 899, 900, 5_000, 200_000])
def test_nesting_past_the_limit_is_a_400_however_deep(depth):
    body = b'{"model": "m", "prompt": "x", "a": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
    with pytest.raises(GatewayError) as caught:
        parse_payload(body, "completions")
    assert caught.value.status == 400 and caught.value.code == "invalid_json" and "deeper" in caught.value.message


def test_nesting_up_to_the_limit_parses():
    body = b'{"model": "m", "prompt": "x", "a": ' + b'{"b": ' * 62 + b"1" + b"}" * 62 + b"}"
    assert parse_payload(body, "completions")["prompt"] == "x"


@pytest.mark.parametrize("role", ["system", "developer", "user", "assistant", "tool", "function"])
def test_every_openai_role_is_accepted(role):
    assert parse_payload(json.dumps({**CHAT, "messages": [{"role": role, "content": "x"}]}).encode(), "chat")


@pytest.mark.parametrize("role", [SECRET, "User", "ipython", "", None, 1, ["user"], {"user": 1}])
def test_any_other_role_is_refused_without_echoing_it(role):
    message = {"content": "x"} if role is None else {"role": role, "content": "x"}
    error = chat_error([message])
    assert error.code == "invalid_role" and "messages[0].role" in error.message and SECRET not in error.message


@pytest.mark.parametrize("content", [5, True, {"type": "text", "text": "x"}, 1.5])
def test_content_must_be_a_string_a_list_or_null(content):
    assert chat_error([{"role": "user", "content": content}]).code == "invalid_content"


GOOD_PARTS = [
    "a bare string", {"type": "text", "text": "x"}, {"type": "input_text", "text": "x"},
    {"type": "output_text", "text": "x"}, {"type": "refusal", "refusal": "no"}, {"type": "thinking", "thinking": "t"},
    {"type": "tool_reference", "name": "grep"}, {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
    {"type": "input_image", "image_url": "https://x/a.png"}, {"type": "audio_url", "audio_url": {"url": "https://x/a"}},
    {"type": "video_url", "video_url": {"url": "https://x/v"}},
    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    {"type": "image_embeds", "image_embeds": "AAAA"}, {"type": "audio_embeds", "audio_embeds": {"x": "AAAA"}},
    {"type": "video_embeds", "video_embeds": "AAAA"}, {"type": "prompt_embeds", "data": "AAAA"},
    {"image_url": "https://x/a.png"}, {"image_url": {"url": "https://x/a.png"}}, {"audio_url": "https://x/a"},
    {"input_audio": {"data": "AA==", "format": "mp3"}}, {"image_embeds": None, "uuid": "u1"},
    {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}},
]


@pytest.mark.parametrize("part", GOOD_PARTS, ids=lambda p: p if isinstance(p, str) else p.get("type", "typeless"))
def test_every_part_type_vllm_reads_is_accepted_in_its_documented_shape(part):
    assert parse_payload(json.dumps({**CHAT, "messages": [{"role": "user", "content": [part]}]}).encode(), "chat")


BAD_PARTS = [
    {"type": "text", "text": 5}, {"type": "text", "text": ["x"]}, {"type": "text"}, {"type": "input_text", "text": {}},
    {"type": "refusal", "refusal": 1}, {"type": "thinking", "thinking": None}, {"type": "tool_reference", "name": 2},
    {"type": "image_url", "image_url": "https://x/a.png"}, {"type": "image_url", "image_url": {"url": 5}},
    {"type": "input_image", "image_url": {"url": "https://x"}}, {"type": "audio_url", "audio_url": None},
    {"type": "input_audio", "input_audio": "AA=="}, {"type": "input_audio", "input_audio": {"data": "AA=="}},
    {"type": "image_embeds", "image_embeds": 5}, {"type": "prompt_embeds", "data": []},
    {"type": "image_url", "image_url": {"url": "https://x"}, "text": 7},  # every reader takes "text" as text
    {"type": "file", "file": {"file_id": "f"}}, {"type": "image_pil"}, {"type": SECRET, "text": "x"},
    {"type": 5, "text": "x"}, {"type": ["text"], "text": "x"}, {"text": "no type"}, {}, 5, None, ["x"],
]


@pytest.mark.parametrize("part", BAD_PARTS, ids=repr)
def test_any_other_part_is_a_400_naming_where_never_what(part):
    error = chat_error([{"role": "system", "content": "s"}, {"role": "user", "content": ["ok", part]}])
    assert error.code == "invalid_content_part" and error.message.startswith("messages[1].content[1]")
    assert SECRET not in error.message


@pytest.mark.parametrize("options", [[], "yes", 1, True])
def test_stream_options_must_be_an_object(options):
    assert error_code(json.dumps({"model": "m", "prompt": "x", "stream": True, "stream_options": options}).encode()) \
        == "invalid_stream_options"
