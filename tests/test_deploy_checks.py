"""Production settings pass `manage.py check --deploy`, and HTTPS is enforced once secure cookies are on.

Settings are read once per process, so each case runs Django in a subprocess with its own environment.
"""
import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOST = "switchyard.example.com"
YEAR = 365 * 24 * 3600


@pytest.fixture
def production(tmp_path) -> dict:
    """DEBUG off, secure cookies on, a real secret, a real host name; nothing inherited from this shell."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SWITCHYARD_VAR_DIR": str(tmp_path / "var"),
            "DJANGO_SETTINGS_MODULE": "controlplane.settings", "DEBUG": "false", "SWITCHYARD_SECURE_COOKIES": "true",
            "SECRET_KEY": secrets.token_urlsafe(48), "ALLOWED_HOSTS": HOST}


def run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def deploy_check(env: dict) -> subprocess.CompletedProcess:
    return run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], env)


SETTINGS_PROBE = """
import json, django
django.setup()
from django.conf import settings as s
print(json.dumps({name: getattr(s, name) for name in (
    "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD", "SECURE_SSL_REDIRECT",
    "SECURE_PROXY_SSL_HEADER", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SILENCED_SYSTEM_CHECKS",
    "SILENCED_CHECK_REASONS")}))
"""


def settings_for(env: dict) -> dict:
    done = run(["-c", SETTINGS_PROBE], env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_check_deploy_is_clean_with_production_settings(production):
    done = deploy_check(production)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout + done.stderr
    assert "WARNINGS" not in done.stdout + done.stderr


def test_each_silenced_check_says_why(production):
    found = settings_for(production)
    assert found["SILENCED_SYSTEM_CHECKS"] == list(found["SILENCED_CHECK_REASONS"])
    assert set(found["SILENCED_SYSTEM_CHECKS"]) <= {"security.W005", "security.W021"}
    assert all(len(reason) > 40 for reason in found["SILENCED_CHECK_REASONS"].values())


def test_opting_into_subdomains_and_preload_needs_no_silencing(production):
    env = {**production, "SWITCHYARD_HSTS_INCLUDE_SUBDOMAINS": "true", "SWITCHYARD_HSTS_PRELOAD": "true"}
    assert settings_for(env)["SILENCED_SYSTEM_CHECKS"] == []
    done = deploy_check(env)
    assert done.returncode == 0 and "no issues (0 silenced)" in done.stdout + done.stderr, done.stdout + done.stderr


def test_secure_cookies_turn_on_hsts_and_the_https_redirect(production):
    found = settings_for(production)
    assert (found["SECURE_HSTS_SECONDS"], found["SECURE_SSL_REDIRECT"]) == (YEAR, True)
    assert found["SESSION_COOKIE_SECURE"] and found["CSRF_COOKIE_SECURE"]
    assert found["SECURE_PROXY_SSL_HEADER"] is None


def test_the_plain_http_demo_gets_neither(production):
    env = {k: v for k, v in production.items() if k != "SWITCHYARD_SECURE_COOKIES"}
    found = settings_for(env)
    assert (found["SECURE_HSTS_SECONDS"], found["SECURE_SSL_REDIRECT"], found["SILENCED_SYSTEM_CHECKS"]) == (0, False,
                                                                                                             [])


def test_options_are_read_from_the_environment(production):
    env = {**production, "SWITCHYARD_HSTS_SECONDS": "3600", "SWITCHYARD_SSL_REDIRECT": "false",
           "SWITCHYARD_PROXY_SSL_HEADER": "X-Forwarded-Proto"}
    found = settings_for(env)
    assert (found["SECURE_HSTS_SECONDS"], found["SECURE_SSL_REDIRECT"]) == (3600, False)
    assert found["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]


@pytest.mark.parametrize("extra,variable", [
    ({"SWITCHYARD_HSTS_PRELOAD": "true"}, "SWITCHYARD_HSTS_PRELOAD"),  # preload without subdomains
    ({"SWITCHYARD_HSTS_SECONDS": "-1"}, "SWITCHYARD_HSTS_SECONDS"),
    ({"SWITCHYARD_SSL_REDIRECT": "sometimes"}, "SWITCHYARD_SSL_REDIRECT"),
    ({"SWITCHYARD_PROXY_SSL_HEADER": "X-Forwarded-Proto: https"}, "SWITCHYARD_PROXY_SSL_HEADER"),
])
def test_a_bad_value_stops_start_up_naming_the_variable(production, extra, variable):
    done = run(["-c", SETTINGS_PROBE], {**production, **extra})
    assert done.returncode != 0 and variable in done.stderr


HTTP_PROBE = """
import json, django
django.setup()
from django.test import Client
client = Client(HTTP_HOST="%s")
answers = {}
for name, path, extra in (("http", "/console/login/", {}), ("https", "/console/login/", {"secure": True}),
                          ("healthz", "/healthz", {}),
                          ("proxied", "/console/login/", {"HTTP_X_FORWARDED_PROTO": "https"})):
    r = client.get(path, **extra)
    answers[name] = [r.status_code, r.get("Location"), r.get("Strict-Transport-Security")]
print(json.dumps(answers))
""" % HOST


def test_answers_over_http_and_https(production):
    env = {**production, "SWITCHYARD_PROXY_SSL_HEADER": "X-Forwarded-Proto"}
    collected = run(["manage.py", "collectstatic", "--noinput", "-v", "0"], env)  # as every deploy does
    assert collected.returncode == 0, collected.stderr
    done = run(["-c", HTTP_PROBE], env)
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    assert answers["http"] == [301, f"https://{HOST}/console/login/", None]
    assert answers["https"] == [200, None, f"max-age={YEAR}"]
    assert answers["proxied"] == [200, None, f"max-age={YEAR}"]  # TLS ended at the proxy
    assert answers["healthz"] == [200, None, None]  # probes stay on plain HTTP
