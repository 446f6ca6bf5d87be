"""A throwaway Switchyard for a benchmark: SQLite var dir, simulator engines, the real gateway process."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from bench._procs import REPO_ROOT, Processes, free_port, stderr_tail, wait_http

BENCH_REDIS_DB = int(os.environ.get("BENCH_REDIS_DB", "13"))  # another database keeps concurrent runs apart


def redis_url() -> str:
    """REDIS_URL's server (else 127.0.0.1:6379), database 13 (BENCH_REDIS_DB): limit counters never mix with real
    ones."""
    parts = urlsplit(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    return urlunsplit((parts.scheme, parts.netloc, f"/{BENCH_REDIS_DB}", "", ""))


def redis_problem(url: str) -> str | None:
    """None when Redis answers PING, else why not."""
    import redis

    try:
        redis.Redis.from_url(url, socket_timeout=2).ping()
        return None
    except redis.RedisError as error:
        return str(error)


@dataclass
class Fleet:
    """Simulators + gateway in one throwaway var dir; use inside `Processes`."""

    procs: Processes
    model: str = "sim-coder"
    var_dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="switchyard-bench-"))
    simulators: list = field(default_factory=list)  # [(proc, port, args)]
    gateway: subprocess.Popen | None = None
    gateway_url: str = ""
    key: str = ""
    keys: list = field(default_factory=list)  # one per tenant (`create_rows(tenants=N)`)
    metrics_urls: dict = field(default_factory=dict)  # gateway pid -> its /metrics listener's URL

    def env(self) -> dict:
        """The children's environment: this var dir's SQLite, the bench Redis database, quiet logs."""
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        env.update(SWITCHYARD_VAR_DIR=self.var_dir, SWITCHYARD_GATEWAY_REDIS_URL=redis_url(),
                   DJANGO_SETTINGS_MODULE="controlplane.settings", LOG_LEVEL="WARNING",
                   PYTHONPATH=str(REPO_ROOT))
        return env

    def start_simulator(self, *args: str) -> str:
        port = free_port()
        proc = self._simulator(port, args)
        self.simulators.append((proc, port, args))
        return f"http://127.0.0.1:{port}"

    def restart_simulators(self) -> None:
        """Fresh engines on the same ports (the instance rows stay valid): empty caches, zeroed counters."""
        for proc, _, _ in self.simulators:
            self.procs.stop(proc)
        self.simulators = [(self._simulator(port, args), port, args) for _, port, args in self.simulators]

    def _simulator(self, port: int, args) -> subprocess.Popen:
        proc = self.procs.python("-m", "simulator", "--port", str(port), "--served-model-name", self.model,
                                 "--seed", "1", *args, env=self.env())
        _wait(f"http://127.0.0.1:{port}/health", proc)
        return proc

    def create_rows(self, policy: str | None = None, key_rpm: int | None = None, tenants: int = 1) -> None:
        urls = [f"http://127.0.0.1:{port}" for _, port, _ in self.simulators]
        command = [sys.executable, "-m", "bench._fixture", "--model", self.model,
                   *(arg for url in urls for arg in ("--url", url)), *(["--policy", policy] if policy else []),
                   *(["--key-rpm", str(key_rpm)] if key_rpm else []), "--tenants", str(tenants)]
        done = subprocess.run(command, cwd=REPO_ROOT, env=self.env(), capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"bench fixture failed:\n{done.stderr[-3000:]}")
        rows = json.loads(done.stdout.strip().splitlines()[-1])
        self.key, self.keys = rows["key"], rows["keys"]

    def start_gateway(self, policy: str | None = None, env: dict | None = None) -> None:
        """`python -m gateway` (or the policy-forcing launcher); waits until it serves the model.
        `env`: settings of its own, as for `extra_gateway`."""
        self.stop_gateway()
        self.gateway, self.gateway_url = self.extra_gateway(policy=policy, env=env)

    def extra_gateway(self, *, policy: str | None = None, workers: int = 1,
                      env: dict | None = None) -> tuple[subprocess.Popen, str]:
        """Another gateway on the same rows (stopped with the other processes); waits until it serves.
        `env`: settings of its own (e.g. SWITCHYARD_GATEWAY_QUEUE_*)."""
        port, metrics_port = free_port(), free_port()
        module = ["-m", "bench._gateway_proc", "--policy", policy] if policy else ["-m", "gateway"]
        proc = self.procs.python(*module, "--port", str(port), "--workers", str(workers),
                                 "--metrics-port", str(metrics_port), env={**self.env(), **(env or {})})
        url = f"http://127.0.0.1:{port}"
        self.metrics_urls[proc.pid] = f"http://127.0.0.1:{metrics_port}/metrics"
        _wait(f"{url}/v1/models", proc, headers={"authorization": f"Bearer {self.key}"},
              accept=lambda status, body: status == 200 and self.model.encode() in body)
        return proc, url

    @property
    def gateway_metrics_url(self) -> str:
        """The started gateway's /metrics (on its own listener, not the public port)."""
        return self.metrics_urls[self.gateway.pid]

    def stop_gateway(self) -> None:
        if self.gateway is not None:
            self.procs.stop(self.gateway)
            self.gateway = None

    def cleanup(self) -> None:
        shutil.rmtree(self.var_dir, ignore_errors=True)


def _wait(url: str, proc, **kwargs) -> None:
    try:
        wait_http(url, proc=proc, timeout=60, **kwargs)
    except RuntimeError as error:
        raise RuntimeError(f"{error}\n{stderr_tail(proc)}") from None
