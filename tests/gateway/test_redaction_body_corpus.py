"""A secret planted in each field of a completions or chat body is never forwarded nor stored.

The corpus (tests/gateway/corpus/bodies.jsonl, written by generate.py from request_fields.py)
puts one real-format secret into every field the two endpoints know of, wrong types and unknown
fields included. Each body is either refused with a 4xx that does not echo the secret, or
redacted so that neither the engine's body, nor the stored prompt sample (in every mode), nor a
stored or echoed model name holds any piece of it.
"""
import json
from pathlib import Path

import pytest

from gateway.errors import GatewayError
from gateway.pipeline.payload import parse_payload, prompt_sample, upstream_body
from gateway.pipeline.redaction import PREFIX_MARGIN, redact_body, redact_prefix
from tests.gateway.leaks import leaked, leaked_in_value
from tests.gateway.request_fields import FIELDS

BODIES = [json.loads(line) for line in (Path(__file__).parent / "corpus" / "bodies.jsonl").read_text().splitlines()]
SAMPLE = 500


def test_the_corpus_covers_every_field_and_every_kind():
    assert {(r["endpoint"], r["field"]) for r in BODIES} == {(e, f) for e, fields in FIELDS.items() for f in fields}
    assert len({r["kind"] for r in BODIES}) >= 13


@pytest.mark.parametrize("record", BODIES, ids=lambda r: f"{r['endpoint']}:{r['field']}:{r['kind']}")
def test_a_secret_in_any_field_is_refused_or_redacted(record):
    secret, kind = [record["secret"]], record["endpoint"]
    texts = []
    try:
        payload = parse_payload(json.dumps(record["body"]).encode(), kind, texts)
    except GatewayError as error:
        assert 400 <= error.status < 500 and not leaked(secret, error.message)
        return
    if record["field"] == "model":  # never forwarded (404 first): stored and echoed redacted
        assert not leaked(secret, redact_prefix(payload["model"], 200))
        return
    result = redact_body(payload, "redact", texts)  # as the gateway calls it, with the parse's texts
    assert result.counts.get(record["kind"], 0) >= 1, result.counts
    assert result == redact_body(payload, "redact")  # the texts only spare a walk
    assert not leaked_in_value(secret, json.loads(upstream_body(result.body, salt="t", priority=None)))
    assert not leaked(secret, prompt_sample(result.body, kind, SAMPLE))
    assert redact_body(payload, "block").blocked
    # With redaction off the engine gets the body as sent, but the stored sample is still redacted.
    assert not leaked(secret, redact_prefix(prompt_sample(payload, kind, SAMPLE + PREFIX_MARGIN), SAMPLE))
