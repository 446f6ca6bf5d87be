"""Reading `usage` from an engine's JSON answer without decoding the whole answer."""
import json

import pytest

from gateway.pipeline.proxy import usage_of

USAGE = {"prompt_tokens": 7, "completion_tokens": 16, "total_tokens": 23, "prompt_tokens_details": {"cached_tokens": 0}}


@pytest.mark.parametrize("answer", [
    {"id": "cmpl-1", "choices": [{"text": "def f(): pass"}], "usage": USAGE},
    {"id": "cmpl-2", "choices": [{"text": "usage"}], "usage": USAGE},  # the text is the word itself
    {"id": "cmpl-3", "choices": [{"text": '"usage": {"prompt_tokens": 99}'}], "usage": USAGE},  # quoted in text
    {"id": "cmpl-4", "usage": USAGE, "choices": [{"text": "usage first"}]},  # not last: found anyway
    {"id": "cmpl-5", "choices": [{"text": "x"}], "usage": USAGE, "system_fingerprint": None},
])
def test_usage_is_found_whatever_the_text_says(answer):
    assert usage_of(json.dumps(answer).encode()) == USAGE
    assert usage_of(json.dumps(answer, separators=(",", ":")).encode()) == USAGE


@pytest.mark.parametrize("body", [b"", b"not json", b"[1, 2]", b'{"choices": []}', b'{"usage": null}'])
def test_no_usage(body):
    assert usage_of(body) is None
