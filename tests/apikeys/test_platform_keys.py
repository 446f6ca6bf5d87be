"""Platform keys: tenant-less, scope `admin`, acting as the platform admin who holds them, so platform
automation needs no console session or CSRF token. The README's platform block runs with only such a key."""
import io
import json
import logging
import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from apikeys import keyformat
from apikeys.models import ApiKey
from audit.models import AuditEvent
from tenants.models import Tenant, TenantStatus
from tests.api.conftest import console_login
from tests.apikeys.test_key_secrecy import _database_text, _secret_parts
from tests.conftest import bearer
from tests.factories import make_key, make_user

README = Path(settings.BASE_DIR) / "README.md"


def _readme_platform_block() -> list[str]:
    """The shell lines of the README's "Platform automation" block, continuation lines joined."""
    section = README.read_text().split("## Platform automation", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def _curl(line: str) -> tuple[str, str, dict, dict | None]:
    """(method, path, headers, JSON body) of one `curl` line (only the options the README uses)."""
    words, headers, body, method = shlex.split(line)[1:], {}, None, None
    while words:
        word = words.pop(0)
        if word == "-H":
            name, _, value = words.pop(0).partition(": ")
            headers[name] = value
        elif word == "-d":
            body = json.loads(words.pop(0))
        elif word == "-X":
            method = words.pop(0)
        else:
            url = word
    return method or ("POST" if body is not None else "GET"), urlsplit(url).path, headers, body


def _mint_by_cli(*args) -> str:
    out = io.StringIO()
    call_command("create_api_key", *args, stdout=out)
    return re.search(r"^API key \(shown once, store it now\): (\S+)$", out.getvalue(), re.M).group(1)


def test_the_readmes_platform_calls_work_with_only_a_platform_key(db, caplog):
    caplog.set_level(logging.DEBUG)
    admin = make_user("admin", staff=True)  # `make run`'s superuser; the command defaults to it
    [mint, *calls] = _readme_platform_block()
    assert "create_api_key --platform" in mint and len(calls) >= 5
    raw = _mint_by_cli("--platform", "--name", "automation")
    key = ApiKey.objects.get(prefix=keyformat.display_prefix(raw))
    assert (key.tenant, key.user, key.scopes) == (None, admin, ["admin"])
    client = APIClient(enforce_csrf_checks=True)  # no session at all: the key alone
    for line in calls:
        method, path, headers, body = _curl(line)
        assert headers.pop("Authorization") == "Bearer $PKEY"
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        response = client.generic(method, path, json.dumps(body) if body else "", content_type="application/json")
        assert response.status_code < 300, (line, response.status_code, response.content[:300])
    assert Tenant.objects.get(slug="acme").status == TenantStatus.SUSPENDED
    _assert_secret_nowhere(raw, caplog)


def _assert_secret_nowhere(raw, caplog):
    stored = _database_text() + json.dumps(list(AuditEvent.objects.values()), default=str)
    assert keyformat.hash_key(raw) in stored
    for secret in _secret_parts(raw):
        assert secret not in stored and secret not in caplog.text


def test_the_command_names_the_admin_or_refuses(db):
    with pytest.raises(CommandError, match="no superuser"):
        _mint_by_cli("--platform")
    make_user("ops", staff=True)
    make_user("ops2", staff=True)
    with pytest.raises(CommandError, match="more than one superuser"):
        _mint_by_cli("--platform")
    make_user("plain")
    with pytest.raises(CommandError, match="not an active platform admin"):
        _mint_by_cli("--platform", "--user", "plain@example.test")
    raw = _mint_by_cli("--platform", "--user", "ops2@example.test")
    assert ApiKey.objects.get(prefix=keyformat.display_prefix(raw)).user.username == "ops2"
    with pytest.raises(CommandError):  # one or the other
        _mint_by_cli("--platform", "--tenant", "x", "--scope", "admin")


def test_a_platform_admin_mints_one_over_rest_and_it_is_shown_once(alice, charlie):
    session = console_login(charlie.user)
    created = session.post("/api/v1/platform/keys/", {"name": "terraform"}, format="json")
    assert created.status_code == 201
    raw = created.json()["key"]
    assert created.json()["scopes"] == ["admin"] and created.json()["username"] == "charlie"
    listed = session.get("/api/v1/platform/keys/").json()["results"]
    assert [row["prefix"] for row in listed] == [created.json()["prefix"]] and "key" not in listed[0]
    made = bearer(raw).post("/api/v1/tenants/", {"slug": "made-by-key", "name": "K", "admin_email": "o@k.test"},
                            format="json")
    assert made.status_code == 201
    row = AuditEvent.objects.filter(action="api_key.create").latest("seq")
    assert row.tenant_id is None and row.actor_label == "charlie" and raw not in json.dumps(row.after, default=str)


def test_tenant_roles_are_no_platform_power(alice):
    """An owner's admin key, or the owner's session, cannot see or mint platform keys."""
    assert bearer(alice.key).post("/api/v1/platform/keys/", {"name": "x"}, format="json").status_code == 403
    assert console_login(alice.user).get("/api/v1/platform/keys/").status_code == 403
    assert APIClient().get("/api/v1/platform/keys/").status_code == 401


def test_a_platform_key_loses_its_powers_with_its_holders_staff_status(alice, charlie):
    raw = make_key(None, charlie.user, name="automation").raw
    create = {"slug": "fresh", "name": "Fresh", "admin_email": "o@fresh.test"}
    charlie.user.is_staff = charlie.user.is_superuser = False
    charlie.user.save()
    assert bearer(raw).post("/api/v1/tenants/", create, format="json").status_code == 403
    assert bearer(raw).get(f"/api/v1/tenants/{alice.tenant.slug}/").status_code == 404


def test_a_revoked_platform_key_is_refused_at_once(charlie):
    session = console_login(charlie.user)
    created = session.post("/api/v1/platform/keys/", {"name": "temp"}, format="json").json()
    assert session.post(f"/api/v1/platform/keys/{created['id']}/revoke/").json()["state"] == "revoked"
    response = bearer(created["key"]).get("/api/v1/tenants/")
    assert response.status_code == 401 and "revoked" in response.json()["detail"]


def test_the_console_mints_and_revokes_platform_keys_for_platform_admins_only(alice, charlie):
    staff = console_login(charlie.user)
    page = staff.post("/console/keys/platform/new", {"platform-name": "nightly"})
    assert page.status_code == 200 and b"shown only once" in page.content
    key = ApiKey.objects.get(tenant=None, name="nightly")
    raw = re.search(rb'value="(sy_live_[0-9A-Za-z]+)"', page.content).group(1).decode()
    assert keyformat.hash_key(raw) == key.key_hash and key.user == charlie.user
    listing = staff.get("/console/keys/").content.decode()
    assert "Platform keys" in listing and key.prefix in listing and raw not in listing
    owner = console_login(alice.user)
    assert "Platform keys" not in owner.get("/console/keys/").content.decode()
    assert owner.post("/console/keys/platform/new", {"platform-name": "x"}).status_code == 404
    assert owner.post(f"/console/keys/{key.pk}/revoke").status_code == 404
    assert staff.post(f"/console/keys/{key.pk}/revoke").status_code == 302
    assert bearer(raw).get("/api/v1/tenants/").status_code == 401
