"""Real processes for tests: simulators and one vLLM, started and stopped with bench/_procs.py's helpers.

Every suite that starts an engine goes through here, so start-up, readiness and clean-up behave
the same everywhere (and a failing start shows the process's own output).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench._procs import REPO_ROOT, free_port, stop, wait_http  # noqa: F401  (free_port: for the suites that import it from here)
from controlplane.cpu_engine_env import cpu_engine_env

ENGINE_PYTHON = REPO_ROOT / ".venv-engine" / "bin" / "python"
# A deadline, not a timing assertion: vLLM's start-up is ~45 s on an idle machine, minutes on a busy one.
VLLM_START_DEADLINE_SECONDS = 900
VLLM_ENV = cpu_engine_env(kv_cache_gib=1)  # unpinned, one OpenMP thread: as the local runtime starts engines


def start_simulator(model: str, *args: str, timeout: float = 20.0) -> tuple[subprocess.Popen, str]:
    """`python -m simulator` serving `model` in its own process group; (process, base URL) once healthy."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "--port", str(port), "--served-model-name", model,
                             *args], cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", proc=proc, timeout=timeout,
                  output=lambda: proc.stderr.read().decode() if proc.poll() is not None else "")
    except RuntimeError:
        stop(proc, grace=20)
        raise
    return proc, url


def start_vllm(argv: list[str], log_path: Path) -> tuple[subprocess.Popen, str]:
    """The CPU vLLM OpenAI server with `argv` (which must hold `--port`); (process, base URL) once healthy."""
    port = argv[argv.index("--port") + 1]
    log = log_path.open("w")
    proc = subprocess.Popen([str(ENGINE_PYTHON), "-m", "vllm.entrypoints.openai.api_server", *argv],
                            env={**os.environ, **VLLM_ENV}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    log.close()  # the child keeps its own descriptor
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", proc=proc, timeout=VLLM_START_DEADLINE_SECONDS, interval=1.0,
                  output=lambda: log_path.read_text()[-4000:])
    except RuntimeError:
        stop(proc, grace=30)
        raise
    return proc, url


class OidcProvider:
    """tests/oidc_provider (django-oauth-toolkit, OIDC on) in its own process on a loopback port."""

    def __init__(self, state_dir: Path):
        self.state_dir, self.port = state_dir, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.issuer = f"{self.url}/o"
        self.env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.oidc_provider.settings",
                    "IDP_STATE_DIR": str(state_dir), "IDP_ISSUER": self.issuer}
        for name in ("DATABASE_URL", "REDIS_URL"):  # its own SQLite file, nothing of the suite's
            self.env.pop(name, None)
        self.proc = None

    def manage(self, *args: str) -> None:
        subprocess.run([sys.executable, "-m", "django", *args], cwd=REPO_ROOT, env=self.env, check=True,
                       capture_output=True)

    def start(self) -> "OidcProvider":
        self.manage("migrate", "-v0")
        log_path = self.state_dir / "idp.log"
        with log_path.open("w") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([sys.executable, "-m", "django", "runserver", f"127.0.0.1:{self.port}",
                                          "--noreload"], cwd=REPO_ROOT, env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_http(self.issuer + "/.well-known/openid-configuration", proc=self.proc, timeout=60,
                      output=lambda: log_path.read_text()[-4000:])
        except RuntimeError:
            self.stop()
            raise
        return self

    def misbehave(self, mode: str) -> None:
        """'forged', 'expired', 'wrong-audience' for the next ID tokens; '' to behave again."""
        (self.state_dir / "mode").write_text(mode)

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc, grace=10)
            self.proc = None
