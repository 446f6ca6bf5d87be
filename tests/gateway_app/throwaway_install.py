"""A throwaway install for outage tests: its own database (a private PostgreSQL, or SQLite in its var dir),
its own Redis server (or, given `redis_url`, a Redis it shares as its REDIS_URL with default settings),
a simulator engine, and real `python -m gateway` processes."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

import httpx

from bench._procs import REPO_ROOT, free_port, stop, wait_http
from tests.gateway_app.own_postgres import OwnPostgres

MODEL = "outage-coder"


class Install:
    """A throwaway install (its `env()` is what its processes run with); `close()` removes all of it."""

    def __init__(self, simulators, *, postgres: bool, redis_url: str | None = None, rows: tuple = (), **env: str):
        self.postgres = OwnPostgres() if postgres else None
        self.extra_env = env
        self.var_dir = tempfile.mkdtemp(prefix="switchyard-outage-")
        self.shared_redis_url, self.redis = redis_url, None
        if redis_url is None:
            self.redis_port = free_port()
            self.redis = subprocess.Popen(["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                                           "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL,
                                          start_new_session=True)
        self.engine = simulators("--decode-ms-per-token", "1", "--prefill-ms-per-token", "0", model=MODEL)
        done = subprocess.run([sys.executable, "-m", "tests.gateway_app.outage_rows", "--model", MODEL,
                               "--url", self.engine.url, *rows], cwd=REPO_ROOT, env=self.env(), capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        rows = json.loads(done.stdout.strip().splitlines()[-1])
        self.key, self.cold_key = rows["key"], rows["cold_key"]

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        if self.postgres is not None:
            env["DATABASE_URL"] = self.postgres.url
        env = {k: v for k, v in env.items() if not k.startswith("SWITCHYARD_GATEWAY_REDIS")}
        if self.shared_redis_url is not None:  # cache, broker, change bus and gateway: all on it
            env["REDIS_URL"] = self.shared_redis_url
        else:
            env["SWITCHYARD_GATEWAY_REDIS_URL"] = f"redis://127.0.0.1:{self.redis_port}/0"
        env.update(SWITCHYARD_VAR_DIR=self.var_dir, PYTHONPATH=str(REPO_ROOT),
                   SWITCHYARD_GATEWAY_USAGE_FLUSH_SECONDS="0.2", DJANGO_SETTINGS_MODULE="controlplane.settings",
                   LOG_LEVEL="WARNING", **self.extra_env)
        return env

    def start_gateway(self, workers: int = 2) -> tuple[subprocess.Popen, str]:
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "gateway", "--port", str(port), "--workers", str(workers),
                                 "--metrics-port", "0"],
                                cwd=REPO_ROOT, env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/healthz", proc=proc, timeout=60)
        return proc, url

    def spool_segments(self) -> list[str]:
        directory = os.path.join(self.var_dir, "usage-spool")
        return sorted(name for name in os.listdir(directory) if name.startswith("segment-"))

    def stored(self) -> list[str]:
        """The request ids of the install's usage rows."""
        sql = "SELECT request_id FROM usage_usageevent"
        if self.postgres is not None:
            return sorted(row[0] for row in self.postgres.query(sql))
        with sqlite3.connect(self.sqlite_path, timeout=5) as connection:
            return sorted(row[0] for row in connection.execute(sql))

    @property
    def sqlite_path(self) -> str:
        return os.path.join(self.var_dir, "switchyard.sqlite3")

    def close(self) -> None:
        if self.redis is not None:
            stop(self.redis)
        if self.postgres is not None:
            self.postgres.destroy()
        shutil.rmtree(self.var_dir, ignore_errors=True)



def call(url: str, key: str, body: dict | None = None, path: str = "/v1/completions") -> httpx.Response:
    """On a connection of its own, so the kernel spreads the calls over both workers."""
    with httpx.Client(timeout=30) as client:
        headers = {"authorization": f"Bearer {key}"}
        if body is None:
            return client.get(url + path, headers=headers)
        return client.post(url + path, json=body, headers=headers)


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"] == {"message": response.json()["error"]["message"], "type": "server_error",
                                        "param": None, "code": "service_unavailable"}
    assert int(response.headers["retry-after"]) >= 1
