"""Write the redaction corpus: fake but format-correct secrets, look-alikes that are not, and
request bodies with a secret planted in each field (tests/gateway/request_fields.py).

Deterministic (seeded): `python tests/gateway/corpus/generate.py` rewrites the same three files.
No value here is a real credential; each is random text in a real credential's shape.
"""
import base64
import hashlib
import json
import random
import string
import sys
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository, for tests.gateway.request_fields
ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + "234567"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


def pick(rng, alphabet, n):
    return "".join(rng.choice(alphabet) for _ in range(n))


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def fake_jwt(rng):
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = {"sub": str(rng.randint(1000, 99999)), "iat": rng.randint(1.6e9, 1.8e9)}
    return f"{header}.{b64url(json.dumps(payload).encode())}.{b64url(rng.randbytes(32))}"


def fake_pem(rng, label):
    body = base64.b64encode(rng.randbytes(rng.randint(300, 900))).decode()
    lines = "\n".join(body[i:i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----"


SECRET_MAKERS = {
    "aws_access_key": lambda r: r.choice(["AKIA", "ASIA"]) + pick(r, UPPER_DIGITS, 16),
    "aws_secret_key": lambda r: pick(r, B64, 40),
    "github_token": lambda r: r.choice(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]) + pick(r, ALNUM, 36),
    "github_pat": lambda r: f"github_pat_{pick(r, ALNUM, 22)}_{pick(r, ALNUM, 59)}",
    "gitlab_token": lambda r: "glpat-" + pick(r, URLSAFE, 20),
    "slack_token": lambda r: f"{r.choice(['xoxb', 'xoxp', 'xoxa'])}-{pick(r, string.digits, 12)}"
                             f"-{pick(r, string.digits, 13)}-{pick(r, ALNUM, 24)}",
    "slack_app_token": lambda r: f"xapp-1-A{pick(r, UPPER_DIGITS, 10)}-{pick(r, string.digits, 13)}"
                                 f"-{pick(r, '0123456789abcdef', 64)}",
    "slack_webhook": lambda r: f"https://hooks.slack.com/services/T{pick(r, UPPER_DIGITS, 8)}"
                               f"/B{pick(r, UPPER_DIGITS, 10)}/{pick(r, ALNUM, 24)}",
    "jwt": fake_jwt,
    "private_key": lambda r: fake_pem(r, r.choice(
        ["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY"])),
    "openai_key": lambda r: r.choice(["sk-" + pick(r, ALNUM, 48), "sk-proj-" + pick(r, URLSAFE, 156)]),
    "switchyard_key": lambda r: f"sy_{r.choice(['live', 'test', 'dev'])}_{pick(r, ALNUM, 38)}",
    "stripe_key": lambda r: "sk_live_" + pick(r, ALNUM, r.choice([24, 99])),
    "google_api_key": lambda r: "AIza" + pick(r, URLSAFE, 35),
    "generic_secret": lambda r: pick(r, ALNUM + "!@#%^&*-_=+", r.randint(16, 40)),
}
EXPECTED_KIND = {"github_pat": "github_token", "slack_app_token": "slack_token"}

SECRET_TEMPLATES = {
    "aws_access_key": ['AWS_ACCESS_KEY_ID = "{s}"\n', "export AWS_ACCESS_KEY_ID={s}\n",
                       'session = boto3.Session(aws_access_key_id="{s}")\n'],
    "aws_secret_key": ['aws_secret_access_key = {s}\n', 'AWS_SECRET_ACCESS_KEY="{s}"\n',
                       '  "SecretAccessKey": "{s}",\n'],
    "github_token": ['headers = {{"Authorization": "token {s}"}}\n', "GITHUB_TOKEN={s}\n",
                     "git clone https://x-access-token:{s}@github.com/acme/repo.git\n"],
    "github_pat": ['const octokit = new Octokit({{ auth: "{s}" }});\n'],
    "gitlab_token": ['curl --header "PRIVATE-TOKEN: {s}" https://gitlab.example.com/api/v4\n'],
    "slack_token": ['client = WebClient(token="{s}")\n', "SLACK_BOT_TOKEN: {s}\n"],
    "slack_app_token": ['app_token = "{s}"\n'],
    "slack_webhook": ['requests.post("{s}", json={{"text": "deploy done"}})\n'],
    "jwt": ['curl -H "Authorization: Bearer {s}" https://api.internal/v1/me\n',
            "const token = '{s}';\n"],
    "private_key": ['PRIVATE_KEY = """{s}"""\n', "key: |\n  {s}\n"],
    "openai_key": ['client = OpenAI(api_key="{s}")\n', "OPENAI_API_KEY={s}\n"],
    "switchyard_key": ['switchyard = Client(key="{s}")\n', "Authorization: Bearer {s}\n"],
    "stripe_key": ['stripe.api_key = "{s}"\n'],
    "google_api_key": ['const MAPS_KEY = "{s}";\n', "url = f\"https://maps.googleapis.com/x?key={s}\"\n"],
    "generic_secret": ['DB_PASSWORD={s}\n', '  "client_secret": "{s}",\n', "password: '{s}'\n",
                       'SECRET_KEY = "{s}"\n', "api_key := \"{s}\"\n", "auth_token => '{s}',\n"],
}
CODE_AROUND = [
    ("import os\nimport requests\n\n", "\nresp = requests.get(URL, timeout=10)\n"),
    ("// config.js\n'use strict';\n", "module.exports = config;\n"),
    ("# deploy settings\nversion: '3.8'\nservices:\n", "  restart: always\n"),
    ("def connect():\n    \"\"\"Open the connection.\"\"\"\n", "    return client\n"),
    ("package main\n\nimport \"fmt\"\n\n", "func main() { fmt.Println(\"ok\") }\n"),
]


def secret_records(rng):
    records = []
    for name, maker in SECRET_MAKERS.items():
        count = 6 if name == "generic_secret" else 4
        for i in range(count):
            secret = maker(rng)
            template = SECRET_TEMPLATES[name][i % len(SECRET_TEMPLATES[name])]
            before, after = rng.choice(CODE_AROUND)
            text = before + template.format(s=secret) + after
            records.append({"kind": EXPECTED_KIND.get(name, name), "secret": secret, "text": text})
    return records


def lorem(rng, words=40):
    vocab = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
             "incididunt ut labore et dolore magna aliqua").split()
    return " ".join(rng.choice(vocab) for _ in range(words))


def hexs(rng, n):
    return pick(rng, "0123456789abcdef", n)


LOOKALIKE_MAKERS = {
    "uuid": lambda r: f'request_id = "{uuid.UUID(int=r.getrandbits(128), version=4)}"',
    "git_sha1": lambda r: f"commit {hexs(r, 40)}\nAuthor: Dev <dev@example.com>",
    "git_sha256": lambda r: f"git checkout {hexs(r, 64)}",
    "md5": lambda r: f'checksum_md5 = "{hashlib.md5(r.randbytes(8)).hexdigest()}"',
    "sha1": lambda r: f"sha1sum: {hashlib.sha1(r.randbytes(8)).hexdigest()}  model.bin",
    "sha256": lambda r: f'"sha256": "{hashlib.sha256(r.randbytes(8)).hexdigest()}",',
    "docker_digest": lambda r: f"image: vllm/vllm-openai@sha256:{hexs(r, 64)}",
    "data_uri": lambda r: '<img src="data:image/png;base64,'
                          + base64.b64encode(r.randbytes(r.randint(60, 300))).decode() + '">',
    "b64_fixture": lambda r: f'FIXTURE_BYTES = "{base64.b64encode(r.randbytes(r.randint(24, 120))).decode()}"',
    "semver": lambda r: f'"version": "{r.randint(0, 20)}.{r.randint(0, 40)}.{r.randint(0, 99)}'
                        f'{r.choice(["", "-rc.1", "-beta.2", "+build.5"])}"',
    "css_color": lambda r: f".btn-{r.randint(1, 9)} {{ color: #{hexs(r, 6)}; background: #{hexs(r, 3)}; }}",
    "css_spinner": lambda r: f'<div class="sk-cube-grid sk-fading-circle-{r.randint(1, 12)}"></div>',
    "long_identifier": lambda r: r.choice([
        "def get_access_token_from_refresh_token(refresh_token_value):",
        "class PasswordResetTokenGeneratorWithExpiry(PasswordResetTokenGenerator):",
        "const maxTokensPerRequestForStreamingCompletions = computeLimit(cfg);",
        "tokenizer = AutoTokenizer.from_pretrained(\"deepseek-ai/deepseek-coder-1.3b-base\")",
        f"MAX_PROMPT_TOKENS_FOR_CONTEXT_WINDOW_V{r.randint(2, 9)} = {r.randint(1000, 99999)}",
    ]),
    "lorem": lambda r: lorem(r),
    "url": lambda r: (f"https://github.com/acme/repo-{r.randint(1, 999)}/blob/{hexs(r, 40)}"
                      f"/src/app.py#L{r.randint(1, 500)}"),
    "import_path": lambda r: r.choice([
        "from django.contrib.auth.tokens import default_token_generator",
        "import { getAccessToken } from '@/lib/auth/tokens';",
        "from transformers.models.llama.tokenization_llama_fast import LlamaTokenizerFast",
        "use crate::auth::secret_store::SecretStoreBackend;",
    ]),
    "secret_named_nonsecret": lambda r: r.choice([
        'SECRET_KEY = os.environ["DJANGO_SECRET_KEY"]',
        'api_key = os.getenv("OPENAI_API_KEY")',
        'password = "${DB_PASSWORD}"',
        'api_key: "<your-api-key>"',
        'OPENAI_API_KEY=YOUR_API_KEY_HERE',
        'TOKEN_URL = "https://auth.example.com/oauth2/token"',
        'token_type = "bearer_access_token"',
        'password_hasher = "django.contrib.auth.hashers.Argon2PasswordHasher"',
        "client_secret = settings.OAUTH_CLIENT_SECRET",
        f"max_tokens = {r.randint(16, 100000)}",
        "secret_name: prod/database/credentials",
        "access_key = get_secret(\"aws/access-key\")",
        'password_field = "confirm_password_input"',
        "token: {{ .Values.auth.tokenSecretRef }}",
    ]),
    "uuid_list": lambda r: json.dumps([str(uuid.UUID(int=r.getrandbits(128))) for _ in range(3)]),
    "numbers": lambda r: f"ids = {[r.randint(10**11, 10**13) for _ in range(4)]}",
}


def lookalike_records(rng, per_kind=12):
    records = []
    for name, maker in LOOKALIKE_MAKERS.items():
        for _ in range(per_kind):
            records.append({"kind": name, "text": maker(rng) + "\n"})
    return records


def write(path, records):
    path.write_text("".join(json.dumps(rec, sort_keys=True) + "\n" for rec in records))


def body_records(secrets):
    """One body per field of each endpoint, the secret kinds taken in turn, one of each first."""
    from tests.gateway.request_fields import FIELDS

    by_kind = {}
    for record in secrets:
        by_kind.setdefault(record["kind"], []).append(record)
    turns = [records[i % len(records)] for i in range(4) for records in by_kind.values()]
    records = []
    for endpoint, fields in FIELDS.items():
        for i, (field, build) in enumerate(fields.items()):
            secret = turns[i % len(turns)]
            records.append({"endpoint": endpoint, "field": field, "kind": secret["kind"], "secret": secret["secret"],
                            "body": build(secret["text"], "qwen2.5-coder-7b")})
    return records


def main():
    rng = random.Random(20261130)
    secrets = secret_records(rng)
    write(HERE / "secrets.jsonl", secrets)
    write(HERE / "lookalikes.jsonl", lookalike_records(rng))
    write(HERE / "bodies.jsonl", body_records(secrets))


if __name__ == "__main__":
    main()
