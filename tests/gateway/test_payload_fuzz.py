"""The request parser over any body: every answer is a well-formed OpenAI 4xx or a valid request.

A valid request is one everything after the parser handles: the prompt estimate, redaction in
each mode (with and without the parse's texts), the prompt sample, the prefix-affinity key, the
de-duplication key and the body re-encoded for the engine — nothing raises, and what is stored or
sent is encodable text. Hypothesis draws the bodies (tests/gateway/payload_strategies.py); a
deterministic sweep puts every wrong type into every known field.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import GatewayError
from gateway.pipeline.dedup import cache_key, cacheable
from gateway.pipeline.feedback import parse_feedback
from gateway.pipeline.payload import max_tokens, parse_payload, prompt_sample, request_work, upstream_body, wants_usage
from gateway.pipeline.redaction import redact_body, redact_prefix
from gateway.routing.policies.keys import prefix_key
from tests.gateway.payload_strategies import (
    FIELD_NAMES,
    MESSAGE_FIELDS,
    PART_KEYS,
    chat_bodies,
    completion_bodies,
    is_openai_error,
    raw_bodies,
    values,
)

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def answer(raw: bytes, kind: str) -> dict | None:
    """The parsed request, or None after checking that the refusal is a well-formed 4xx."""
    texts: list[str] = []
    try:
        payload = parse_payload(raw, kind, texts)
    except GatewayError as error:
        assert 400 <= error.status < 500, error.status
        assert is_openai_error(error.body(), error.status)
        return None
    downstream(payload, raw, kind, texts)
    return payload


def downstream(payload: dict, raw: bytes, kind: str, texts: list[str]) -> None:
    try:
        request_work(payload, raw, kind)  # admission's worst case; its own 400s (n, best_of, batches)
    except GatewayError as error:
        assert 400 <= error.status < 500 and is_openai_error(error.body(), error.status)
    max_tokens(payload, kind)
    wants_usage(payload)
    prefix_key(payload, "chat" if kind == "chat" else "completion")
    if cacheable(payload):
        cache_key("p", 1, (1,), kind, payload)
    for mode in ("redact", "block", "off"):
        result = redact_body(payload, mode, texts)
        assert result == redact_body(payload, mode)  # the parse's texts only spare a walk
        sent = upstream_body(result.body, salt="tenant-salt", priority=10)
        assert isinstance(json.loads(sent), dict)  # valid UTF-8 JSON for the engine
        sample = prompt_sample(result.body, kind, 500)
        redact_prefix(sample, 200).encode("utf-8")  # storable text


@FUZZ
@given(raw_bodies(completion_bodies))
def test_completions_bodies_are_answered_well_formed(raw):
    answer(raw, "completions")


@FUZZ
@given(raw_bodies(chat_bodies))
def test_chat_bodies_are_answered_well_formed(raw):
    answer(raw, "chat")


@FUZZ
@given(st.one_of(raw_bodies(st.fixed_dictionaries({}, optional={"request_id": values, "accepted": values})),
                 st.binary(max_size=64)))
def test_feedback_bodies_are_answered_well_formed(raw):
    try:
        rid, accepted = parse_feedback(raw)
    except GatewayError as error:
        assert error.status == 400 and is_openai_error(error.body(), 400)
    else:
        assert len(rid) == 32 and isinstance(accepted, bool)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_at_all(raw):
    answer(raw, "completions")
    answer(raw, "chat")


WRONG = [None, True, False, 0, -1, 2 ** 64, -(2 ** 70), 1.5, float("nan"), float("inf"), "", "x", "\x00", "é" * 3,
         [], [1], ["x"], [None], [[1, 2]], [{}], {}, {"a": 1}, {"url": 1}, [[[[]]]]]


@pytest.mark.parametrize("field", FIELD_NAMES + ("model", "prompt", "messages"))
def test_every_top_level_field_of_every_type(field):
    for value in WRONG:
        for kind, base in (("completions", {"model": "m", "prompt": "x"}),
                           ("chat", {"model": "m", "messages": [{"role": "user", "content": "x"}]})):
            answer(json.dumps({**base, field: value}, allow_nan=True).encode(), kind)


@pytest.mark.parametrize("field", MESSAGE_FIELDS)
def test_every_message_field_of_every_type(field):
    for value in WRONG:
        answer(json.dumps({"model": "m", "messages": [{"role": "user", "content": "x", field: value}]},
                          allow_nan=True).encode(), "chat")


@pytest.mark.parametrize("key", PART_KEYS)
def test_every_content_part_key_of_every_type(key):
    for part_type in (None, "text", "image_url", "input_audio", "image_embeds", "tool_reference", "refusal"):
        for value in WRONG:
            part = {"type": part_type, key: value} if part_type and key != "type" else {key: value}
            answer(json.dumps({"model": "m", "messages": [{"role": "user", "content": [part]}]},
                              allow_nan=True).encode(), "chat")
