"""The chart mounts every secret as a file and passes NAME_FILE: settings must read the URLs that way too.

Settings are read once per process, so each case runs Django in a subprocess with its own environment.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, django
django.setup()
from django.conf import settings as s
db = s.DATABASES["default"]
print(json.dumps({"db": [db["ENGINE"], db["HOST"], db["PASSWORD"]], "broker": s.CELERY_BROKER_URL,
                  "gateway_redis": s.SWITCHYARD_GATEWAY_REDIS_URL, "static_root": str(s.STATIC_ROOT)}))
"""


def settings_with(env: dict) -> subprocess.CompletedProcess:
    base = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    return subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env={**base, **env}, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def secret_dir(tmp_path) -> Path:
    (tmp_path / "DATABASE_URL").write_text("postgres://switchyard:s3cret@db.example:5432/switchyard\n")
    (tmp_path / "REDIS_URL").write_text("redis://:hunter2@redis.example:6379/0\n")
    return tmp_path


def test_database_and_redis_urls_come_from_files(secret_dir, tmp_path):
    done = settings_with({"SWITCHYARD_VAR_DIR": str(tmp_path / "var"),
                          "DATABASE_URL_FILE": str(secret_dir / "DATABASE_URL"),
                          "REDIS_URL_FILE": str(secret_dir / "REDIS_URL")})
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["db"] == ["django.db.backends.postgresql", "db.example", "s3cret"]
    assert found["broker"] == found["gateway_redis"] == "redis://:hunter2@redis.example:6379/0"


def test_an_empty_secret_file_stops_start_up_instead_of_falling_back_to_sqlite(secret_dir, tmp_path):
    (secret_dir / "DATABASE_URL").write_text("\n")
    done = settings_with({"SWITCHYARD_VAR_DIR": str(tmp_path / "var"),
                          "DATABASE_URL_FILE": str(secret_dir / "DATABASE_URL")})
    assert done.returncode != 0
    assert "DATABASE_URL_FILE points at an empty file" in done.stderr


def test_static_root_may_live_outside_the_var_dir(tmp_path):
    """The image collects static files at build into /app/staticfiles; var/ is a volume at run time."""
    done = settings_with({"SWITCHYARD_VAR_DIR": str(tmp_path / "var"), "SWITCHYARD_STATIC_ROOT": "/app/staticfiles"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["static_root"] == "/app/staticfiles"
