"""The simulator's fast paths give exactly what the plain way of doing the same thing gives."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from simulator import protocol, tokenizer
from simulator.tokenizer import SAMPLE_BATCH, VOCAB, TokenSampler, sample_tokens, tokenize


def reference_tokens(seed: int, eos_probability: float, n: int) -> list[str]:
    """One draw at a time with TokenSampler: the definition of a request's output."""
    sampler, out = TokenSampler(seed), []
    while len(out) < n:
        if eos_probability > 0 and sampler.next_unit() < eos_probability:
            out.append("")
        else:
            out.append(sampler.next_token())
    return out


@pytest.mark.parametrize("eos_probability", [0.0, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 7 << 32, 2**64 - 1])
def test_batched_sampling_draws_the_same_tokens(seed, eos_probability):
    n = 3 * SAMPLE_BATCH + 5  # across several batch boundaries
    drawn = list(itertools.islice(sample_tokens(seed, eos_probability), n))
    assert drawn == reference_tokens(seed, eos_probability, n)


def test_jumped_draws_match_stepping_for_many_seeds():
    rng = random.Random(20261130)
    seeds = [rng.getrandbits(64) for _ in range(400)] + list(range(50)) + [2**64 - 1 - i for i in range(50)]
    for seed in seeds:
        drawn = list(itertools.islice(sample_tokens(seed), 2 * SAMPLE_BATCH + 3))
        assert drawn == reference_tokens(seed, 0.0, 2 * SAMPLE_BATCH + 3), seed


def first_state_of_token(index: int) -> int:
    """Smallest LCG state whose draw is VOCAB[index] or later (the formula is monotonic)."""
    low, high = 0, 1 << 64
    while low < high:
        mid = (low + high) // 2
        if tokenizer._token_index(mid) >= index:
            high = mid
        else:
            low = mid + 1
    return low


def test_top16_table_agrees_with_the_formula_on_both_sides_of_every_token_boundary():
    low_bits = (1 << 48) - 1
    ambiguous = set()
    for index in range(1, len(VOCAB)):
        boundary = first_state_of_token(index)
        bucket = boundary >> 48
        if boundary & low_bits:  # the boundary cuts this bucket: the table must not decide it
            ambiguous.add(bucket)
            assert tokenizer._TOP16[bucket] is None
        before, after = (bucket - 1) << 48 | low_bits, (bucket + 1) << 48
        assert tokenizer._TOP16[before >> 48] in (None, VOCAB[tokenizer._token_index(before)])
        assert tokenizer._TOP16[after >> 48] in (None, VOCAB[tokenizer._token_index(after)])
    # Every other bucket holds one token throughout: its first state's.
    assert [bucket for bucket, token in enumerate(tokenizer._TOP16) if token is None] == sorted(ambiguous)
    assert all(token == VOCAB[tokenizer._token_index(bucket << 48)]
               for bucket, token in enumerate(tokenizer._TOP16) if token is not None)


def test_many_seed_check_includes_draws_the_table_leaves_to_the_formula():
    """The seeds of test_jumped_draws_match_stepping_for_many_seeds exercise the fallback."""
    rng = random.Random(20261130)
    near_boundary = 0
    for seed in [rng.getrandbits(64) for _ in range(400)]:
        sampler = TokenSampler(seed)
        for _ in range(2 * SAMPLE_BATCH + 3):
            sampler.next_token()
            near_boundary += tokenizer._TOP16[sampler.state >> 48] is None
    assert near_boundary > 10


def test_portable_batches_match_stepping():
    """The path for big-endian machines (no packed multiply) draws the same tokens."""
    for seed in (0, 1, 12345, 2**64 - 1):
        batches = tokenizer._token_batches(TokenSampler(seed).state)
        drawn = list(itertools.islice(itertools.chain.from_iterable(batches), 2 * SAMPLE_BATCH + 3))
        assert drawn == reference_tokens(seed, 0.0, 2 * SAMPLE_BATCH + 3)


def reference_tokenize(text: str) -> list[str]:
    """ASCII runs sliced into 4 characters; any other character one token per UTF-8 byte."""
    tokens, run = [], ""
    for char in text:
        if char.isascii():
            run += char
            continue
        tokens += [run[i:i + 4] for i in range(0, len(run), 4)]
        run = ""
        size = len(char.encode("utf-8", "surrogatepass"))
        tokens += [char] + [f"{char}#{byte}" for byte in range(1, size)]
    return tokens + [run[i:i + 4] for i in range(0, len(run), 4)]


@pytest.mark.parametrize("text", ["", "abc", "abcd", "def f(n):\n    return n\n", "é😀\n\r\x00 \u2028x" * 3,
                                  "abcdefg中", "\ud800abcde"])
def test_tokenize_matches_slicing(text):
    assert tokenize(text) == reference_tokenize(text)
    if text.isascii():
        assert tokenize(text) == [text[i:i + 4] for i in range(0, len(text), 4)]


@pytest.mark.parametrize("raw", [
    b'{"prompt":"hi","max_tokens":2}', b"{}", '{"prompt":"\u00e9\u00e8"}'.encode(),
    b'{"prompt":"\xed\xa0\x80"}', b'{"prompt":"\xff"}', b"{", b"{\x00", b"[1]", b" {}",
    b'\xef\xbb\xbf{"a":1}', '{"a":1}'.encode("utf-16-le"), '{"a":1}'.encode("utf-16"),
])
def test_parse_json_matches_json_loads(raw):
    try:
        expected = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        with pytest.raises(protocol.ProtocolError) as err:
            protocol.parse_json(raw)
        assert err.value.message == f"Invalid JSON body: {exc}"
        return
    if isinstance(expected, dict):
        assert protocol.parse_json(raw) == expected
    else:
        with pytest.raises(protocol.ProtocolError):
            protocol.parse_json(raw)


@pytest.mark.parametrize("build, shape", [
    (protocol.completion_response, "completion"), (protocol.chat_response, "chat")])
def test_response_templates_match_dumps(build, shape):
    text = 'say "hi"\\\n\t\x00é😀\u2028'
    use = protocol.usage(19, 16, 16)
    body = build("cmpl-x", 1700000000, "sim-coder", text, "length", use)
    decoded = json.loads(body)
    assert protocol.dumps(decoded) == body  # compact, key order kept, ensure_ascii=False
    choice = decoded["choices"][0]
    assert (choice["text"] if shape == "completion" else choice["message"]["content"]) == text
    assert decoded["usage"] == use and decoded["id"] == "cmpl-x"
