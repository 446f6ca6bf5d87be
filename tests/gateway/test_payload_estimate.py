"""What admission reserves for a request (`gateway.pipeline.payload.request_work`): every field that
multiplies work, and a prompt estimate that is an upper bound for the real tokenizers (the tiny model's
byte-level BPE, run in the engine venv, and the simulator's)."""
from __future__ import annotations

import json
import random
import subprocess

import pytest

from gateway.errors import GatewayError
from gateway.pipeline.payload import (
    COMPLETIONS_DEFAULT_MAX_TOKENS,
    DEFAULT_COMPLETION_RESERVE,
    MAX_CHOICES,
    MAX_PROMPTS,
    NON_TEXT_PART_TOKENS,
    parse_payload,
    request_work,
)
from simulator.tokenizer import render_chat, tokenize
from tests.processes import ENGINE_PYTHON, REPO_ROOT

COUNTER = REPO_ROOT / "tests" / "gateway" / "tokenizer_counts.py"


def encoded(body: dict) -> bytes:
    """The tightest encoding a client can send: compact, non-ASCII unescaped."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def work(body: dict, kind: str = "completions"):
    raw = encoded({"model": "m", **body})
    return request_work(parse_payload(raw, kind), raw, kind)


def chat(*contents: str, role: str = "user", **fields) -> dict:
    return {"messages": [{"role": role, "content": c} for c in contents], **fields}


# --- the multipliers -----------------------------------------------------------------------------

def test_n_best_of_and_prompt_batches_multiply_the_completion_reserve():
    assert work({"prompt": "x", "max_tokens": 16, "n": 20}).completion_tokens == 320
    assert work({"prompt": "x", "max_tokens": 10, "n": 2, "best_of": 5}).completion_tokens == 50
    assert work({"prompt": ["a", "b", "c"], "max_tokens": 4, "n": 2}).completion_tokens == 24
    assert work({"prompt": [[1, 2], [3]], "max_tokens": 4}).completion_tokens == 8
    assert work({"prompt": [1, 2, 3], "max_tokens": 4}).completion_tokens == 4  # one prompt of token ids
    assert work(chat("hi", n=3, max_tokens=7), "chat").completion_tokens == 21
    assert work(chat("hi", n=2, best_of=9, max_tokens=7), "chat").completion_tokens == 14  # chat has no best_of


def test_the_length_is_read_as_vllm_reads_it():
    assert work(chat("hi", max_tokens=5, max_completion_tokens=50), "chat").per_choice == 50
    assert work(chat("hi", max_tokens=5), "chat").per_choice == 5
    assert work(chat("hi"), "chat").per_choice == DEFAULT_COMPLETION_RESERVE
    # Completions know only max_tokens; without it vLLM generates 16.
    assert work({"prompt": "x", "max_completion_tokens": 500}).per_choice == COMPLETIONS_DEFAULT_MAX_TOKENS
    assert not work({"prompt": "x"}).asked and work({"prompt": "x", "max_tokens": 3}).asked


@pytest.mark.parametrize("fields, code", [
    ({"n": 0}, "invalid_n"), ({"n": MAX_CHOICES + 1}, "invalid_n"), ({"n": "2"}, "invalid_n"),
    ({"n": True}, "invalid_n"),
    ({"n": 2.0}, "invalid_n"), ({"best_of": 0}, "invalid_best_of"), ({"best_of": "3"}, "invalid_best_of"),
    ({"n": 3, "best_of": 2}, "invalid_best_of"), ({"prompt": ["p"] * (MAX_PROMPTS + 1)}, "invalid_prompt"),
])
def test_multipliers_out_of_bounds_are_openai_shaped_400s(fields, code):
    with pytest.raises(GatewayError) as refused:
        work({"prompt": "x", **fields})
    error = json.loads(refused.value.body())["error"]
    assert refused.value.status == 400 and error["code"] == code and error["type"] == "invalid_request_error"


def test_null_multipliers_mean_one():
    assert work({"prompt": "x", "max_tokens": 2, "n": None, "best_of": None}).completion_tokens == 2


# --- the prompt bound ----------------------------------------------------------------------------

ALPHABETS = {
    "code": "abcdefghijklmnopqrstuvwxyz_ ().:=\n\t0123456789",
    "emoji": "😀🚀🎉👍🏽❤️‍🔥🧑‍💻🇫🇷",
    "cjk": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
    "combining": "e\u0301a\u0300o\u0308n\u0303\u0327\u0332\u20dd",
    "mixed": "def f(): 😀 中文 é\u0301 \u200b\u2028\x00\x7f",
}


def texts(rng: random.Random, count: int) -> list[str]:
    out = []
    for _ in range(count):
        alphabet = ALPHABETS[rng.choice(sorted(ALPHABETS))]
        out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300))))
    return out


def cases(seed: int = 13, count: int = 160) -> list[tuple[str, dict]]:
    """Chat with one to forty messages and content parts, completions strings, batches and token ids."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        shape = i % 5
        if shape == 0:
            out.append(("chat", chat(*texts(rng, rng.randint(1, 40)), role=rng.choice(["user", "system", "tool"]))))
        elif shape == 1:
            parts = [{"type": "text", "text": t} for t in texts(rng, rng.randint(1, 6))]
            out.append(("chat",
                        {"messages": [{"role": "user", "content": parts}, {"role": "assistant", "content": ""}]}))
        elif shape == 2:
            out.append(("completions", {"prompt": (texts(rng, 1)[0] or "x")}))
        elif shape == 3:
            out.append(("completions", {"prompt": [t or "x" for t in texts(rng, rng.randint(2, 8))]}))
        else:
            out.append(("completions", {"prompt": [rng.randrange(3000) for _ in range(rng.randint(1, 200))]}))
    return out


def bounds(requests: list[tuple[str, dict]]) -> list[int]:
    return [work(body, kind).prompt_tokens for kind, body in requests]


def simulator_tokens(kind: str, body: dict) -> int:
    if kind == "chat":
        return len(tokenize(render_chat(body["messages"])))
    prompt = body["prompt"]
    prompts = [prompt] if isinstance(prompt, str) or isinstance(prompt[0], int) else prompt
    return sum(len(p) if isinstance(p, list) else len(tokenize(p)) for p in prompts)


def test_the_bound_holds_for_the_simulators_tokenizer():
    requests = cases(seed=7, count=400)
    for (kind, body), bound in zip(requests, bounds(requests)):
        assert simulator_tokens(kind, body) <= bound, (kind, body)


def test_the_bound_holds_for_the_tiny_models_byte_level_bpe(tiny_model_dir):
    if not ENGINE_PYTHON.exists():
        pytest.skip("the engine venv (.venv-engine) is not installed")
    requests = cases()
    lines = "".join(json.dumps({"kind": kind, "body": body}) + "\n" for kind, body in requests)
    done = subprocess.run([str(ENGINE_PYTHON), str(COUNTER), str(tiny_model_dir)], input=lines, capture_output=True,
                          text=True, timeout=300, env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    *counts, micros = done.stdout.split()
    real = [int(n) for n in counts]
    for (kind, body), tokens, bound in zip(requests, real, bounds(requests)):
        assert tokens <= bound, (kind, body)
    ratios = sorted(b / max(1, t) for t, b in zip(real, bounds(requests)))
    print(f"\nbound / tiny-coder tokens over {len(real)} requests: min {ratios[0]:.2f}, "
          f"median {ratios[len(ratios) // 2]:.2f}, max {ratios[-1]:.2f}; exact count {float(micros):.0f} us each")


def test_non_text_parts_tools_and_suffixes_are_reserved():
    text_only = work({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}, "chat")
    image = work({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}]}, "chat")
    assert image.prompt_tokens >= text_only.prompt_tokens + NON_TEXT_PART_TOKENS
    tools = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
    plain, with_tools = work(chat("hi"), "chat"), work(chat("hi", tools=tools), "chat")
    assert with_tools.prompt_tokens >= plain.prompt_tokens + 2 * len(json.dumps(tools, separators=(",", ":")))
    suffix = "x" * 100
    one, three = work({"prompt": "a", "suffix": suffix}), work({"prompt": ["a", "b", "c"], "suffix": suffix})
    assert three.prompt_tokens >= one.prompt_tokens + 2 * len(suffix)


def test_a_utf16_body_is_bounded_in_utf8_bytes():
    body = {"model": "m", "prompt": "中" * 100}
    raw = json.dumps(body, ensure_ascii=False).encode("utf-16")
    estimate = request_work(parse_payload(raw, "completions"), raw, "completions")
    assert estimate.prompt_tokens >= len(tokenize("中" * 100)) == 300
