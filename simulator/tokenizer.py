"""Cheap deterministic tokenizer and chat-template renderer.

Real BPE tokenizers average roughly 4 characters per token on English text, so
the simulator cuts ASCII text into fixed 4-character chunks.  Every chunk *is*
the token (a short string), which keeps block hashing exact: two ASCII prompts
sharing a textual prefix share exactly ``len(prefix) // 4`` leading tokens.

Other characters (emoji, CJK, combining marks) cost one token per UTF-8 byte:
the most a byte-level BPE can ever make of them (real vocabularies merge common
ones into 1-3 tokens).  Budgets and limits are thus exercised against the worst
case a prompt can be, not against English's 4 characters per token.
"""

from __future__ import annotations

import re
import sys
from itertools import chain
from math import trunc
from typing import Any, Iterator, Optional

CHARS_PER_TOKEN = 4

# Output vocabulary: every token is exactly CHARS_PER_TOKEN characters, so
# generated text fed back as a prompt re-tokenizes to the very same tokens.
_CONSONANTS = "bdfglmnprstv"
_VOWELS = "aeiou"
VOCAB: tuple[str, ...] = tuple(
    " " + c1 + v + c2 for c1 in _CONSONANTS for v in _VOWELS for c2 in "mnrst"
)


# One C-level findall instead of a Python-level slice per token; it yields the
# very same chunks (DOTALL: newlines are characters like any other).
_CHUNKS = re.compile(".{1,%d}" % CHARS_PER_TOKEN, re.DOTALL).findall


# ASCII runs of up to 4 characters, or one other character.
_PIECES = re.compile("[\x00-\x7f]{1,%d}|[^\x00-\x7f]" % CHARS_PER_TOKEN, re.DOTALL).findall


def tokenize(text: str) -> list[str]:
    """Split ASCII text into 4-character tokens (the last one may be shorter); any other
    character is one token per UTF-8 byte (the character, then its continuation bytes' markers)."""
    if text.isascii():
        return _CHUNKS(text)
    tokens: list[str] = []
    for piece in _PIECES(text):
        tokens.append(piece)
        if not piece.isascii():
            size = len(piece.encode("utf-8", "surrogatepass"))
            tokens.extend(f"{piece}#{byte}" for byte in range(1, size))
    return tokens


def message_text(content: Any) -> str:
    """Flatten OpenAI message content (string or list of parts) into text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # Only text parts carry tokens here; images/audio are out of scope.
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    raise TypeError("message content must be a string or a list of parts")


def render_chat(messages: list[dict]) -> str:
    """Render chat messages with a ChatML-like template plus generation prompt."""
    parts = [f"<|{m.get('role', 'user')}|>\n{message_text(m.get('content'))}\n" for m in messages]
    parts.append("<|assistant|>\n")
    return "".join(parts)


_MUL = 6364136223846793005
_INC = 1442695040888963407
_MASK = (1 << 64) - 1
_UNIT = float(1 << 53)
# unit * len(VOCAB) == (state >> 11) * _TOKEN_SCALE exactly: both factors are
# exact in binary, so the one product rounds the same way.
_TOKEN_SCALE = len(VOCAB) / _UNIT


class TokenSampler:
    """Seeded 64-bit LCG picking pseudo-words; deterministic per seed."""

    __slots__ = ("state",)

    def __init__(self, seed: int) -> None:
        self.state = (seed * 0x9E3779B97F4A7C15 + 1) & _MASK

    def next_unit(self) -> float:
        """Advance the generator and return a float in [0, 1)."""
        self.state = state = (self.state * _MUL + _INC) & _MASK
        return (state >> 11) / _UNIT

    def next_token(self) -> str:
        """Return the next pseudo-word token."""
        self.state = state = (self.state * _MUL + _INC) & _MASK
        return VOCAB[int((state >> 11) * _TOKEN_SCALE)]


SAMPLE_BATCH = 16  # tokens drawn per generator resume (a default max_tokens)


def sample_tokens(seed: int, eos_probability: float = 0.0) -> Iterator[str]:
    """Endless output tokens of a request; ``""`` is an end-of-sequence draw.

    The same draws as ``TokenSampler``: one ``next_unit`` for the EOS check
    (only when ``eos_probability > 0``), then ``next_token`` unless it hit.
    Tokens are drawn in batches of SAMPLE_BATCH by a tight loop and handed out
    one at a time by ``chain``'s C iterator: the engine asks for one token per
    step, and resuming a Python generator for each cost more than the draw.
    """
    return chain.from_iterable(_sample_batches(seed, eos_probability))


def _jump_table(n: int) -> tuple[tuple[int, int], ...]:
    """(a_j, c_j) with state_j == (a_j * state_0 + c_j) mod 2**64 for j = 1..n."""
    table, a, c = [], 1, 0
    for _ in range(n):
        a, c = (a * _MUL) & _MASK, (c * _MUL + _INC) & _MASK
        table.append((a, c))
    return tuple(table)


_JUMPS = _jump_table(SAMPLE_BATCH)
# Clearing the 11 low bits instead of shifting them out, and scaling by 2**11
# less, multiplies the very same real numbers: the float product rounds alike.
_HIGH_53 = _MASK & ~0x7FF
_HIGH_SCALE = _TOKEN_SCALE / (1 << 11)


def _sample_batches(seed: int, eos_probability: float) -> Iterator[list[str]]:
    """Lists of SAMPLE_BATCH consecutive draws (see ``sample_tokens``)."""
    state = (seed * 0x9E3779B97F4A7C15 + 1) & _MASK  # TokenSampler(seed).state
    if eos_probability > 0:
        return _eos_batches(state, eos_probability)
    if sys.byteorder == "little":
        return _packed_token_batches(state)
    return _token_batches(state)


def _token_batches(state: int) -> Iterator[list[str]]:
    """Draws without EOS checks: each one jumps straight from the batch's start state."""
    jumps, high, scale, vocab, to_int, mask = _JUMPS, _HIGH_53, _HIGH_SCALE, VOCAB, trunc, _MASK
    a_last, c_last = jumps[-1]
    while True:
        yield [vocab[to_int(((a * state + c) & high) * scale)] for a, c in jumps]
        state = (a_last * state + c_last) & mask


def _token_index(state: int) -> int:
    """VOCAB index of the draw whose LCG state is ``state`` (``TokenSampler.next_token``'s formula)."""
    return trunc((state >> 11) * _TOKEN_SCALE)


def _top16_table() -> list[Optional[str]]:
    """Token for each value of a state's top 16 bits, None where the low bits can still change it.

    The formula is monotonic in the state (an exact int to float conversion, one correctly
    rounded product, trunc), so a 16-bit bucket whose lowest and highest states give the same
    index gives it for every state in between.  Only ~0.5 % of buckets hold a boundary.
    """
    low_bits = (1 << 48) - 1
    table = []
    for top in range(1 << 16):
        first, last = _token_index(top << 48), _token_index((top << 48) | low_bits)
        table.append(VOCAB[first] if first == last else None)
    return table  # a list: list.__getitem__ is a cheaper callable for map() than tuple's


_TOP16 = _top16_table()
# The SAMPLE_BATCH draws of a batch as one integer multiply: 128-bit lane j of
# _PACKED_A * state + _PACKED_C is a_j * state + c_j (which never carries out of
# its lane: (2**64 - 1)**2 + 2**64 - 1 < 2**128); the low 64 bits of a lane are the
# draw's state, whose top 16 bits are the lane's 16-bit word number 3 (little-endian).
_LANE_BYTES = 16
_PACKED_A = sum(a << (128 * j) for j, (a, _) in enumerate(_JUMPS))
_PACKED_C = sum(c << (128 * j) for j, (_, c) in enumerate(_JUMPS))
_LAST_STATE = slice(_LANE_BYTES * (SAMPLE_BATCH - 1), _LANE_BYTES * (SAMPLE_BATCH - 1) + 8)


def _packed_token_batches(state: int) -> Iterator[list[str]]:
    """``_token_batches``' draws from one multiply and a table lookup per token (little-endian only)."""
    packed_a, packed_c, size, top16, last = _PACKED_A, _PACKED_C, _LANE_BYTES * SAMPLE_BATCH, _TOP16, _LAST_STATE
    lookup, from_bytes = top16.__getitem__, int.from_bytes
    while True:
        lanes = (packed_a * state + packed_c).to_bytes(size, "little")
        batch: list = list(map(lookup, memoryview(lanes).cast("H")[3::8]))  # str, or None near a boundary
        if None in batch:  # a draw close to a token boundary: the formula decides
            batch = [token if token is not None else
                     VOCAB[_token_index(from_bytes(lanes[_LANE_BYTES * j:_LANE_BYTES * j + 8], "little"))]
                     for j, token in enumerate(batch)]
        yield batch
        state = from_bytes(lanes[last], "little")


def _eos_batches(state: int, eos_probability: float) -> Iterator[list[str]]:
    """Draws with an EOS check before each token (a variable number of states each)."""
    # Constants as locals for the tight loop; trunc() of a non-negative float
    # is int() of it, minus int()'s type-call overhead.
    mul, inc, mask, unit, scale, vocab, to_int = _MUL, _INC, _MASK, _UNIT, _TOKEN_SCALE, VOCAB, trunc
    while True:
        batch: list[str] = []
        append = batch.append
        for _ in range(SAMPLE_BATCH):
            state = (state * mul + inc) & mask
            if (state >> 11) / unit < eos_probability:
                append("")
                continue
            state = (state * mul + inc) & mask
            append(vocab[to_int((state >> 11) * scale)])
        yield batch
