"""A key is shown once and hashed at rest: the raw secret is in no table, log line, audit row or error."""
import io
import logging
import re

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apikeys import keyformat
from apikeys.models import ApiKey
from audit.models import AuditEvent
from tests.conftest import bearer
from tests.factories import make_member, make_user

RAW_RE = re.compile(r"sy_live_[0-9A-Za-z]{38}")


def _secret_parts(raw: str) -> list[str]:
    """The whole key and the part of it that is never displayed (after the 8-character prefix)."""
    return [raw, raw[len(keyformat.display_prefix(raw)):]]


def _database_text() -> str:
    """Every column of every row of every table, as text."""
    quote = connection.ops.quote_name
    chunks = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {quote(table)}")
            chunks.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(chunks)


def _mint_everywhere(alice) -> list[str]:
    """Keys minted through the REST API (create and rotate) and both management commands."""
    client = bearer(alice.key)
    base = f"/api/v1/tenants/{alice.tenant.slug}/keys/"
    created = client.post(base, {"name": "ci", "scopes": ["inference"]}, format="json").json()
    rotated = client.post(f"{base}{created['id']}/rotate/", {"grace_seconds": 60}, format="json").json()
    out = io.StringIO()
    call_command("create_api_key", "--tenant", alice.tenant.slug, "--scope", "inference", stdout=out)
    call_command("create_tenant", "cli-made", "--name", "CLI", "--admin-email", "own@cli.test", stdout=out)
    return [alice.key, created["key"], rotated["key"], *RAW_RE.findall(out.getvalue())]


def test_raw_keys_appear_nowhere_in_the_database_or_logs(alice, caplog):
    caplog.set_level(logging.DEBUG)
    with CaptureQueriesContext(connection) as ctx:
        raws = _mint_everywhere(alice)
        for raw in raws:
            assert bearer(raw).get("/api/v1/tenants/").status_code in (200, 403)  # authenticated
    assert len(set(raws)) == 5
    dump = _database_text()
    sql = "\n".join(q["sql"] for q in ctx.captured_queries)
    audit = "\n".join(repr((e.actor_label, e.before, e.after)) for e in AuditEvent.objects.all())
    for raw in raws:
        assert keyformat.hash_key(raw) in dump  # the scan does cover the keys table
        for secret in _secret_parts(raw):
            assert secret not in dump and secret not in sql and secret not in audit
            assert secret not in caplog.text


def test_create_and_rotate_responses_show_the_key_once(alice):
    client = bearer(alice.key)
    base = f"/api/v1/tenants/{alice.tenant.slug}/keys/"
    created = client.post(base, {"name": "ide", "scopes": ["inference"]}, format="json")
    assert created.status_code == 201 and keyformat.is_well_formed(created.json()["key"])
    rotated = client.post(f"{base}{created.json()['id']}/rotate/", {}, format="json")
    assert rotated.status_code == 201 and keyformat.is_well_formed(rotated.json()["key"])
    bodies = [client.get(base).content, client.get(f"{base}{created.json()['id']}/").content,
              client.get(f"{base}{rotated.json()['id']}/").content,
              client.post(f"{base}{created.json()['id']}/revoke/").content]
    for body in bodies:
        assert b'"key"' not in body and b"key_hash" not in body
        for raw in (created.json()["key"], rotated.json()["key"], alice.key):
            assert raw.encode() not in body


def test_rejection_errors_never_echo_the_key(alice):
    revoked = bearer(alice.key).post(f"/api/v1/tenants/{alice.tenant.slug}/keys/", {"name": "x", "scopes": ["admin"]},
                                     format="json").json()
    bearer(alice.key).post(f"/api/v1/tenants/{alice.tenant.slug}/keys/{revoked['id']}/revoke/")
    unknown = keyformat.generate_key()
    typo = revoked["key"][:-1] + ("A" if revoked["key"][-1] != "A" else "B")
    for raw in (revoked["key"], unknown, typo, revoked["key"] + "x"):
        response = bearer(raw).get("/api/v1/tenants/")
        assert response.status_code == 401
        for secret in _secret_parts(raw) if keyformat.is_well_formed(raw) else [raw, raw[16:]]:
            assert secret.encode() not in response.content
    labels = list(AuditEvent.objects.filter(action="auth.api_key_rejected").values_list("actor_label", flat=True))
    assert labels and not any(RAW_RE.search(label) for label in labels)


@pytest.mark.parametrize("field", ["name", "scopes"])
def test_validation_errors_on_create_never_contain_a_key(alice, field):
    payload = {"name": "ok", "scopes": ["inference"], field: "" if field == "name" else ["nope"]}
    response = bearer(alice.key).post(f"/api/v1/tenants/{alice.tenant.slug}/keys/", payload, format="json")
    assert response.status_code == 400 and field in response.json()
    assert not RAW_RE.search(response.content.decode())
    assert ApiKey.objects.filter(tenant=alice.tenant).count() == 1


def test_cli_prints_the_key_once_and_stores_only_its_hash(alice):
    make_member(alice.tenant, "developer", make_user("dana"))
    out = io.StringIO()
    call_command("create_api_key", "--tenant", alice.tenant.slug, "--scope", "inference", "--user", "dana@example.test",
                 stdout=out)
    (raw,) = RAW_RE.findall(out.getvalue())
    key = ApiKey.objects.get(key_hash=keyformat.hash_key(raw))
    assert key.user.username == "dana" and key.prefix == keyformat.display_prefix(raw)
