"""The redaction canary: secrets planted in every request field are found nowhere afterwards.

One real-format secret of every kind redaction detects (tests/gateway/corpus/secrets.jsonl) goes
into every field of completions and chat (tests/gateway/request_fields.py), into the headers a
client controls (x-request-id, the affinity key, user-agent, an unknown one), the query string, an
unknown path, the feedback id, secret-named JSON members and a well-formed unknown API key — from a
tenant in each redaction mode. Requests may be refused (4xx) or redacted; either way no piece of any
secret is in the database dump (every table), Redis (limits, de-duplication cache, Django's cache),
any log line (gateway and Django loggers), the exports (usage API and console CSV/JSON, audit export
from API and console, slow requests page), /metrics, the answers, or what the engine received —
recorded by the simulator (`--record-requests`). With redaction `off` the engine gets the prompt as
sent (the tenant's choice, and the proof that the recording and the search see secrets); storage
never does.
"""
from __future__ import annotations

import json
import logging
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.logging import JsonFormatter, RequestIdFilter
from controlplane.redis_keys import install_prefix
from simulator.recording import read_requests
from tenants.models import RedactionMode
from tenants.services import update_tenant
from tests.factories import SYSTEM, make_member, make_tenant, make_user
from tests.gateway.leaks import leaked, strings_of
from tests.gateway.request_fields import FIELDS, PATHS
from tests.gateway_app.conftest import MODEL, inference_key, wait_for
from tests.gateway_app.helpers import add_deployment, make_model_version
from usage.models import UsageEvent
from usage.refresh import refresh_rollups
from usage.selectors import BREAKDOWNS, COST_BREAKDOWNS

pytestmark = pytest.mark.django_db(transaction=True)
CORPUS = Path(__file__).resolve().parents[1] / "gateway" / "corpus" / "secrets.jsonl"


def one_of_each_kind() -> list[dict]:
    records = {}
    for line in CORPUS.read_text().splitlines():
        record = json.loads(line)
        records.setdefault(record["kind"], record)
    return list(records.values())


PLANTED = one_of_each_kind()
CANARIES = [r["secret"] for r in PLANTED]
BUNDLE = "\n".join(r["text"] for r in PLANTED)  # every kind, each in the code around it
ONE_LINE = [s for s in CANARIES if "\n" not in s]  # what fits in a header or a URL
SWITCHYARD = next(r["secret"] for r in PLANTED if r["kind"] == "switchyard_key")
AWS = next(r["secret"] for r in PLANTED if r["kind"] == "aws_access_key")


class Lines(logging.Handler):
    """Every log record of the process (gateway in its thread, Django, libraries) as written — but
    this test's own HTTP client's (httpx logs the URLs it requests; the gateway's engine client is
    its own and logs nothing, the control plane's health checks carry no request text)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.addFilter(lambda record: not record.name.startswith(("httpx", "httpcore")))
        self.addFilter(RequestIdFilter())
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(self.format(record))


@pytest.fixture
def captured_logs():
    handler, root = Lines(), logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler.lines
    root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
def world(gateway, audit_head, simulators, tmp_path, alice, bob):
    record_file = tmp_path / "engine-requests.log"
    engine = simulators("--decode-ms-per-token", "0", "--prefill-ms-per-token", "0",
                        "--record-requests", str(record_file))
    # A coder family: a secret in `suffix` reaches the engine inside the rendered FIM prompt, redacted there.
    add_deployment(make_model_version(MODEL, family="starcoder2"), tenant=None, name="canary", urls=[engine.url])
    carol_tenant = make_tenant("tenant-c")
    carol = SimpleNamespace(tenant=carol_tenant, key=inference_key(carol_tenant,
                                                                    user=make_member(carol_tenant, "owner",
                                                                                     make_user("carol"))))
    update_tenant(bob.tenant, redaction_mode=RedactionMode.BLOCK, actor=SYSTEM)
    update_tenant(carol_tenant, redaction_mode=RedactionMode.OFF, actor=SYSTEM)
    server = gateway(default_user_rpm=1_000_000)
    for who in (alice, bob, carol):
        server.wait_until_serving(who.key.raw, MODEL)
    return SimpleNamespace(server=server, record_file=record_file,
                           tenants={"redact": alice, "block": bob, "off": carol})


def planted_requests(raw_key: str):
    """(method, path, headers, body) of every request a client could hide a secret in."""
    headers = {"authorization": f"Bearer {raw_key}", "x-request-id": SWITCHYARD, "user-agent": " ".join(ONE_LINE),
               "x-switchyard-affinity": " ".join(ONE_LINE), "x-custom-note": AWS}
    query = "?" + urllib.parse.urlencode({"api_key": AWS, "token": SWITCHYARD})
    for kind, fields in FIELDS.items():
        for build in fields.values():
            body = {"temperature": 0, **build(BUNDLE, MODEL)}  # deterministic: answers go to the dedup cache
            yield "POST", PATHS[kind] + query, headers, json.dumps(body).encode()
    for kind, build in (("completions", FIELDS["completions"]["prompt"]),
                        ("chat", FIELDS["chat"]["messages[].content"])):
        yield "POST", PATHS[kind], headers, json.dumps({**build(BUNDLE, MODEL), "stream": True}).encode()
    members = {f"password_{i}": secret for i, secret in enumerate(ONE_LINE)}  # bare values under secret names
    yield "POST", PATHS["completions"], headers, json.dumps({"model": MODEL, "prompt": "x",
                                                             "metadata": members}).encode()
    calls = [{"id": "c1", "type": "function", "function": {"name": "login", "arguments": members}}]
    yield "POST", PATHS["chat"], headers, json.dumps({"model": MODEL, "messages": [
        {"role": "assistant", "content": None, "tool_calls": calls}, {"role": "user", "content": "next"}]}).encode()
    for secret in ONE_LINE:
        yield "POST", "/v1/feedback", headers, json.dumps({"request_id": secret, "accepted": True}).encode()
    yield "POST", "/v1/feedback", headers, json.dumps({"request_id": "0" * 32, "accepted": True,
                                                       "note": BUNDLE}).encode()
    yield "GET", "/v1/models" + query, headers, b""
    yield "POST", "/v1/" + urllib.parse.quote(SWITCHYARD), headers, b"{}"
    unknown_key = {**headers, "authorization": f"Bearer {SWITCHYARD}"}  # well-formed, never issued: 401
    yield "POST", "/v1/completions", unknown_key, json.dumps(FIELDS["completions"]["prompt"](BUNDLE, MODEL)).encode()


def send_everything(world) -> dict[str, list[httpx.Response]]:
    answers = {}
    with httpx.Client(base_url=world.server.url, timeout=30) as client:
        for mode, who in world.tenants.items():
            answers[mode] = [client.request(method, path, headers=headers, content=body)
                             for method, path, headers, body in planted_requests(who.key.raw)]
    return answers


def metered(responses) -> int:
    return sum(1 for r in responses if r.request.url.path in PATHS.values() and r.status_code != 401)


def dump_database() -> str:
    """Every row of every table, as text."""
    pieces = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            for row in cursor.fetchall():
                for value in row:
                    if isinstance(value, (bytes, memoryview)):
                        value = bytes(value).decode("utf-8", "replace")
                    pieces.append("\x00".join(strings_of(value)) if isinstance(value, (dict, list)) else str(value))
    return "\x00".join(pieces)


def dump_redis(server) -> str:
    """Every value under the gateway's prefixes; with REDIS_URL (a database of our own), every key."""
    import redis

    client = redis.Redis.from_url(server.app.config.redis_url)
    pattern = "*" if settings.REDIS_URL else f"{install_prefix(server.app.config.redis_scope)}*"
    pieces = []
    for key in client.scan_iter(match=pattern, count=1000):
        kind = client.type(key)
        value = {b"string": client.get, b"hash": client.hgetall, b"set": client.smembers,
                 b"zset": lambda k: client.zrange(k, 0, -1), b"list": lambda k: client.lrange(k, 0, -1),
                 }.get(kind, lambda k: b"")(key)
        pieces.append(repr(key) + repr(value))
        pieces.append(key.decode("latin-1"))
        for part in (value.items() if isinstance(value, dict)
                     else value if isinstance(value, (list, set)) else [value]):
            pieces.extend(p.decode("utf-8", "replace") for p in (part if isinstance(part, tuple) else (part,))
                          if isinstance(p, bytes))
    client.close()
    return "\x00".join(pieces)


def exports(staff) -> dict[str, str]:
    """What the usage API, the console and the audit trail give out to a platform admin."""
    api, console = APIClient(), Client()
    api.force_authenticate(staff)
    console.force_login(staff)
    got = {}
    for by in BREAKDOWNS:
        for fmt in ("json", "csv"):
            got[f"usage breakdown {by} {fmt}"] = api.get(f"/api/v1/usage/breakdown?by={by}&format={fmt}")
    for by in COST_BREAKDOWNS:
        got[f"usage costs {by} csv"] = api.get(f"/api/v1/usage/costs?by={by}&format=csv")
    got["usage series"] = api.get("/api/v1/usage/series?granularity=hour")
    for fmt in ("jsonl", "csv"):
        got[f"audit export API {fmt}"] = api.get(f"/api/v1/audit/export?format={fmt}")
        got[f"audit export console {fmt}"] = console.get(f"/console/audit/export?format={fmt}")
    got["audit page"] = console.get("/console/audit/")
    got["usage page"] = console.get("/console/usage/")
    got["usage page csv"] = console.get("/console/usage/?format=csv")
    got["slow requests page"] = console.get("/console/slow/")
    texts = {}
    for name, response in got.items():
        assert response.status_code == 200, (name, response.status_code)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        texts[name] = body.decode()
    return texts


def engine_received(world, answers) -> dict[str, list[str]]:
    """What the engine got, per redaction mode: the head (path, headers) and the body, raw and decoded."""
    mode_of = {r.headers["x-request-id"]: mode for mode, responses in answers.items() for r in responses}
    received: dict[str, list[str]] = {mode: [] for mode in answers}
    for head, body in read_requests(world.record_file):
        rid = dict(head["headers"])["x-request-id"]
        text = body.decode("utf-8", "replace")
        try:
            text += "\x00" + "\x00".join(strings_of(json.loads(body)))
        except ValueError:
            pass
        received[mode_of[rid]].append(json.dumps(head) + "\x00" + text)
    return received


def test_planted_secrets_are_nowhere_but_where_redaction_was_turned_off(world, captured_logs, charlie):
    assert leaked(CANARIES, BUNDLE) == CANARIES and len(CANARIES) >= 13  # the search sees every planted secret
    answers = send_everything(world)
    assert not [r for rs in answers.values() for r in rs if r.status_code >= 500], "no request may be a 5xx"
    expected = sum(metered(rs) for rs in answers.values())
    assert wait_for(lambda: UsageEvent.objects.count() >= expected, 20), (UsageEvent.objects.count(), expected)
    refresh_rollups(timezone.now())
    logging.getLogger("gateway").info("canary log check")

    places = {"database": dump_database(), "redis": dump_redis(world.server),
              "logs": "\n".join(captured_logs), "metrics": world.server.app.metrics.render().decode(),
              **{f"export: {name}": text for name, text in exports(charlie.user).items()}}
    received = engine_received(world, answers)
    for mode in ("redact", "block"):
        places[f"answers to the {mode} tenant"] = "\x00".join(r.text + repr(r.headers) for r in answers[mode])
        places[f"engine, {mode} tenant"] = "\x00".join(received[mode])
    leaks = {place: leaked(CANARIES, text) for place, text in places.items()}
    assert {place: found for place, found in leaks.items() if found} == {}

    # The checks could fail: the engine did get the off tenant's secrets, and every place was looked at.
    assert set(leaked(CANARIES, "\x00".join(received["off"]))) == set(CANARIES)
    assert received["redact"] and received["block"] == []  # block: nothing that held a secret was sent
    assert "[REDACTED:" in places["engine, redact tenant"] and "[REDACTED:" in places["database"]
    assert "canary log check" in places["logs"] and UsageEvent.objects.filter(redactions__gt=0).exists()
