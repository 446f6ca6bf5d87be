"""Real processes for tests: free ports, health waits, process-group stops, simulators and one vLLM.

Every suite that starts an engine goes through here, so start-up, readiness and clean-up behave
the same everywhere (and a failing start shows the process's own output).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
ENGINE_PYTHON = REPO_ROOT / ".venv-engine" / "bin" / "python"
# A deadline, not a timing assertion: vLLM's start-up is ~45 s on an idle machine, minutes on a busy one.
VLLM_START_DEADLINE_SECONDS = 900
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float, *, output=lambda: "", interval: float = 0.05):
    """Until GET {url}/health answers 200; RuntimeError with the process's output if it dies or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:3]} exited with {proc.returncode}:\n{output()}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(interval)
    raise RuntimeError(f"{url} did not become healthy within {timeout:g} s:\n{output()}")


def stop_group(proc: subprocess.Popen, grace: float = 20.0) -> None:
    """SIGTERM the process group (engines have children), SIGKILL what lingers past `grace`."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def start_simulator(model: str, *args: str, timeout: float = 20.0) -> tuple[subprocess.Popen, str]:
    """`python -m simulator` serving `model` in its own process group; (process, base URL) once healthy."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "--port", str(port), "--served-model-name", model,
                             *args], cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout, output=lambda: proc.stderr.read().decode() if proc.poll() is not None else "")
    except RuntimeError:
        stop_group(proc)
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
        wait_healthy(url, proc, VLLM_START_DEADLINE_SECONDS, output=lambda: log_path.read_text()[-4000:],
                     interval=1.0)
    except RuntimeError:
        stop_group(proc, grace=30)
        raise
    return proc, url
