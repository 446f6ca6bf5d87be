"""Redaction over completions and chat request bodies, in each mode."""
import pytest

from gateway.pipeline.redaction import RedactionMode, redact_body

GITHUB = "ghp_" + "Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Jh0Gf9EdCbA1234"
AWS = "AKIAQ3EGRTX5ZBN7W4KD"


def test_completion_prompt_string_is_redacted_and_counted():
    result = redact_body({"model": "m", "prompt": f"token = '{GITHUB}'", "max_tokens": 5})
    assert result.body["prompt"] == "token = '[REDACTED:github_token]'"
    assert result.counts == {"github_token": 1}
    assert result.body["max_tokens"] == 5


def test_completion_prompt_list_and_fim_suffix_are_redacted():
    body = {"prompt": [f"a = '{AWS}'", "plain"], "suffix": f"b = '{AWS}'"}
    result = redact_body(body)
    assert result.body["prompt"] == ["a = '[REDACTED:aws_access_key]'", "plain"]
    assert result.body["suffix"] == "b = '[REDACTED:aws_access_key]'"
    assert result.counts == {"aws_access_key": 2}


def test_token_id_prompts_pass_through():
    result = redact_body({"prompt": [1, 2, 3]})
    assert result.body["prompt"] == [1, 2, 3] and result.found == 0


def test_chat_string_and_text_parts_are_redacted_other_parts_kept():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    body = {"messages": [
        {"role": "system", "content": "You review code."},
        {"role": "user", "content": [{"type": "text", "text": f"why does {AWS} fail?"}, image]},
        {"role": "assistant", "content": None},
    ]}
    result = redact_body(body)
    assert result.body["messages"][1]["content"][0]["text"] == "why does [REDACTED:aws_access_key] fail?"
    assert result.body["messages"][1]["content"][1] == image
    assert result.body["messages"][2] == {"role": "assistant", "content": None}


def test_the_callers_body_is_not_mutated():
    body = {"messages": [{"role": "user", "content": f"k={GITHUB}"}]}
    redact_body(body)
    assert body["messages"][0]["content"] == f"k={GITHUB}"


def test_block_mode_reports_but_forwards_nothing_changed():
    body = {"prompt": f"k={GITHUB}"}
    result = redact_body(body, "block")
    assert result.blocked and result.counts == {"github_token": 1}
    assert result.body is body


def test_block_mode_without_secrets_is_not_blocked():
    assert not redact_body({"prompt": "print('hello')"}, RedactionMode.BLOCK).blocked


def test_off_mode_does_not_look():
    body = {"prompt": f"k={GITHUB}"}
    result = redact_body(body, RedactionMode.OFF)
    assert result.body is body and result.found == 0


def test_results_never_carry_the_secret():
    result = redact_body({"prompt": f"k={GITHUB} and {AWS}"})
    assert GITHUB not in repr(result.counts) and AWS not in repr(result.counts)


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError):
        redact_body({"prompt": "x"}, "maybe")


def test_every_string_of_the_body_is_scanned_at_any_depth_keys_included():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "description": f"uses {AWS}"}}],
            "x_unknown": {"a": [{"b": GITHUB}]}, f"{AWS}": 1, "metadata": {f"k {GITHUB}": "v"}}
    result = redact_body(body)
    assert result.counts == {"aws_access_key": 2, "github_token": 2}
    assert result.body["tools"][0]["function"]["description"] == "uses [REDACTED:aws_access_key]"
    assert result.body["x_unknown"] == {"a": [{"b": "[REDACTED:github_token]"}]}
    assert result.body["[REDACTED:aws_access_key]"] == 1 and AWS not in result.body
    assert result.body["metadata"] == {"k [REDACTED:github_token]": "v"}
    assert body["tools"][0]["function"]["description"] == f"uses {AWS}"  # the caller's body is as it was


def test_the_model_name_is_left_for_the_registry_lookup():
    result = redact_body({"model": AWS, "prompt": "x"})
    assert result.body["model"] == AWS and result.found == 0


def test_a_string_among_numbers_is_still_found():
    result = redact_body({"prompt": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, AWS]})
    assert result.body["prompt"][-1] == "[REDACTED:aws_access_key]"
    ids = list(range(5000))
    assert redact_body({"prompt": ids}).body["prompt"] is ids


def test_non_text_parts_and_media_are_scanned_too():
    parts = [{"type": "image_url", "image_url": {"url": f"https://b.s3.amazonaws.com/a.png?X-Amz-Credential={AWS}"}},
             {"type": "input_audio", "input_audio": {"data": AWS, "format": "wav"}},
             {"type": "refusal", "refusal": AWS}]
    result = redact_body({"messages": [{"role": "user", "content": parts}]})
    assert result.counts == {"aws_access_key": 3}


SECRET_MEMBERS = [("password", "q8ZT2mWx9LkR4vNp"), ("api_key", "Ab3DE5gH7JK9mN1pQ3"),
                  ("clientSecret", "9f#Kq2!ZmX7vL0pT"), ("DB_PASSWORD", "hP4@zR8qLm2#Xv6W"),
                  ("aws_secret_access_key", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8dTm2kLp")]
PLAIN_MEMBERS = [("token_type", "bearer_access_token"), ("password_field", "confirm_password_input"),
                 ("secret", "settings.SECRET_KEY_VALUE"), ("api_key", "<your-api-key-here>"),
                 ("token", "${GITHUB_TOKEN}"), ("max_tokens_hint", "4096"),
                 ("password", "correct horse battery staple"), ("secret_name", "prod/db/creds")]


@pytest.mark.parametrize("name, value", SECRET_MEMBERS)
def test_a_secret_named_member_is_read_as_an_assignment(name, value):
    # {"password": "..."}: tool arguments given as an object, metadata, template kwargs
    calls = [{"function": {"name": "login", "arguments": {name: value}}}]
    body = {"messages": [{"role": "assistant", "tool_calls": calls}], "metadata": {name: value}}
    result = redact_body(body)
    assert result.found == 2 and value not in repr(result.body)
    assert result.body["metadata"][name].startswith("[REDACTED:")


@pytest.mark.parametrize("name, value", PLAIN_MEMBERS)
def test_a_secret_named_member_that_is_no_secret_stays(name, value):
    body = {"metadata": {name: value}, "chat_template_kwargs": {name: value}}
    assert redact_body(body).body is body
