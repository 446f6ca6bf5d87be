"""Quick measurement (not a test): `PYTHONPATH=. .venv/bin/python tests/gateway/bench_redaction.py`.

First redact_text over big texts (wall clock), then what every request pays at the boundary —
parse_payload + redact_body + prompt_sample — per body shape, in CPU µs per request (best of 5).
Point PYTHONPATH at another checkout's copy of gateway/ to compare before and after in one run.
"""
import base64
import json
import pathlib
import random
import time
import timeit

import django

from gateway.pipeline.payload import parse_payload, prompt_sample
from gateway.pipeline.redaction import redact_body, redact_text

base = pathlib.Path(django.__file__).parent
code = (base / "db/models/query.py").read_text()[:100_000]
prose = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 2000)[:100_000]
llm = ((base / "db/models/query.py").read_text()[:50_000]
       + "\nmax_tokens = 4096\ntokenizer = load_tokenizer()\napi_key = os.environ['K']\n") * 2
secret = code[:50_000] + '\nAWS_ACCESS_KEY_ID = "AKIAABCDEFGHIJKLMNOP"\npassword = "Xk9mQ2vL8pZr4Tw7"\n' + code[50_000:]
for name, text in [("code, no secrets", code), ("prose, no secrets", prose), ("code with 'token'/'api_key' words", llm),
                   ("code with 2 secrets", secret)]:
    n = 50
    ms = 1e3 * timeit.timeit(lambda text=text: redact_text(text), number=n) / n
    print(f"{name:36s} {len(text):7d} chars  {ms:6.3f} ms")

M = "qwen2.5-coder-7b"
rules = "Never print a password or token; rotate the api_key when asked.\n" * 150
turns = [{"role": r, "content": f"turn {i}: def f{i}(x):\n    return x * {i}\n"}
         for i, r in enumerate(["user", "assistant"] * 3)]


def tool(i):
    properties = {"path": {"type": "string", "description": "repository-relative path"},
                  "max_lines": {"type": "integer"}}
    return {"type": "function", "function": {"name": f"tool_{i}", "description": "Reads a file of the repository.",
                                             "parameters": {"type": "object", "properties": properties,
                                                            "required": ["path"]}}}


image = "data:image/png;base64," + base64.b64encode(random.Random(1).randbytes(750_000)).decode()
BODIES = {
    "completion, 60 chars": {"model": M, "prompt": "def fibonacci(n):\n    if n < 2:\n        return n\n    return f",
                             "max_tokens": 16, "temperature": 0},
    "chat, 7 short messages": {"model": M, "messages": [{"role": "system", "content": "You complete code."}, *turns],
                               "max_tokens": 64, "stream": True},
    "FIM, 52 KB": {"model": M, "prompt": code[:40_000], "suffix": code[40_000:52_000], "max_tokens": 64,
                   "temperature": 0.2},
    "chat, 36 KB, 150 secret-ish names": {"model": M,
                                          "messages": [{"role": "system", "content": rules[:9_700]},
                                                       {"role": "user", "content": code[:26_000]}], "max_tokens": 256},
    "completion, 8000 token ids": {"model": M, "prompt": list(range(8000)), "max_tokens": 16},
    "chat, tools and a schema": {"model": M, "messages": turns, "tools": [tool(i) for i in range(8)],
                                 "response_format": {"type": "json_object"}},
    "chat, 1 MB image": {"model": M,
                         "messages": [{"role": "user",
                                       "content": [{"type": "text", "text": "what is wrong here?"},
                                                   {"type": "image_url", "image_url": {"url": image}}]}]},
}


def per_request(raw, kind):
    try:  # as gateway/pipeline/inference.py does: the parse collects the texts redaction looks at
        texts = []
        result = redact_body(parse_payload(raw, kind, texts), "redact", texts)
    except TypeError:  # a checkout from before the texts hint
        result = redact_body(parse_payload(raw, kind), "redact")
    return prompt_sample(result.body, kind, 500)


print(f"\n{'per request (parse + redact + sample)':40s}   CPU µs, best of 5")
for name, body in BODIES.items():
    raw, kind = json.dumps(body).encode(), "chat" if "messages" in body else "completions"
    n = max(3, int(200_000 / (len(raw) + 2_000)))
    best = min(_t for _t in (timeit.Timer(lambda raw=raw, kind=kind: per_request(raw, kind),
                                          timer=time.process_time).timeit(n) / n for _ in range(5)))
    print(f"{name:40s} {len(raw):9d} B  {best * 1e6:9.1f}")
