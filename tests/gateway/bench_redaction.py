"""Quick measurement (not a test): `PYTHONPATH=. .venv/bin/python tests/gateway/bench_redaction.py`."""
import pathlib, timeit, django
from gateway.redaction import redact_text
base = pathlib.Path(django.__file__).parent
code = (base / "db/models/query.py").read_text()[:100_000]
prose = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 2000)[:100_000]
llm = ((base / "db/models/query.py").read_text()[:50_000] + "\nmax_tokens = 4096\ntokenizer = load_tokenizer()\napi_key = os.environ['K']\n") * 2
secret = code[:50_000] + '\nAWS_ACCESS_KEY_ID = "AKIAABCDEFGHIJKLMNOP"\npassword = "Xk9mQ2vL8pZr4Tw7"\n' + code[50_000:]
for name, text in [("code, no secrets", code), ("prose, no secrets", prose), ("code with 'token'/'api_key' words", llm), ("code with 2 secrets", secret)]:
    n = 50
    ms = 1e3 * timeit.timeit(lambda: redact_text(text), number=n) / n
    print(f"{name:36s} {len(text):7d} chars  {ms:6.3f} ms")
