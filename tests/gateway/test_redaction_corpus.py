"""Secret redaction over a corpus of fake-but-format-correct secrets and of look-alikes.

The corpus is written by `tests/gateway/corpus/generate.py` (seeded, so it is reproducible).
"""
import json
from collections import Counter
from pathlib import Path

import pytest

from gateway.pipeline.redaction import redact_text

CORPUS = Path(__file__).resolve().parent / "corpus"


def load(name):
    return [json.loads(line) for line in (CORPUS / name).read_text().splitlines() if line]


SECRETS = load("secrets.jsonl")
LOOKALIKES = load("lookalikes.jsonl")


def test_corpus_is_big_enough_to_mean_something():
    assert len(SECRETS) >= 50
    assert len(LOOKALIKES) >= 200
    assert len({r["kind"] for r in SECRETS}) >= 13


@pytest.mark.parametrize("record", SECRETS, ids=lambda r: r["kind"])
def test_every_real_format_secret_is_redacted_with_its_kind(record):
    counts = Counter()
    out = redact_text(record["text"], counts)
    assert record["secret"] not in out
    assert f"[REDACTED:{record['kind']}]" in out
    assert counts[record["kind"]] >= 1


def test_precision_over_the_corpus_is_at_least_95_percent():
    true_positives = sum(1 for r in SECRETS if r["secret"] not in redact_text(r["text"]))
    false_positives = [r for r in LOOKALIKES if redact_text(r["text"]) != r["text"]]
    precision = true_positives / (true_positives + len(false_positives))
    assert true_positives == len(SECRETS)  # recall 100 %
    assert precision >= 0.95, [r["text"][:80] for r in false_positives]


@pytest.mark.parametrize("kind", sorted({r["kind"] for r in LOOKALIKES}))
def test_no_lookalike_category_is_mostly_redacted(kind):
    records = [r for r in LOOKALIKES if r["kind"] == kind]
    redacted = [r["text"] for r in records if redact_text(r["text"]) != r["text"]]
    assert len(redacted) <= len(records) // 10, redacted


def test_code_around_a_secret_survives_untouched():
    text = 'import os\nclient = OpenAI(api_key="sk-' + "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5hJ7kL9mN1pQ" + '")\n'
    assert redact_text(text) == 'import os\nclient = OpenAI(api_key="[REDACTED:openai_key]")\n'


def test_a_private_key_cut_off_by_the_prompt_end_is_still_hidden():
    text = "key = '''-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM\nqwe"
    assert redact_text(text) == "key = '''[REDACTED:private_key]"
