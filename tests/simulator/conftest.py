"""Fixtures that run the simulator as a real subprocess (``python -m simulator``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# Make ``simulator`` and ``sim_helpers`` importable whatever pytest's import
# mode or rootdir configuration is.
for _path in (str(REPO_ROOT), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from sim_helpers import MODEL  # noqa: E402


def free_port() -> int:
    """Ask the OS for an unused TCP port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(proc: subprocess.Popen, base: str, timeout: float = 20.0) -> None:
    """Poll /health until it answers 200 (or the process dies)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"simulator exited early: {proc.stderr.read().decode()}")
        try:
            if httpx.get(base + "/health", timeout=0.5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError("simulator did not become healthy")


def stop(proc: subprocess.Popen) -> None:
    """Terminate the simulator's whole process group."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="session")
def start_simulator() -> Iterator[Callable[..., str]]:
    """Factory: start ``python -m simulator`` with extra CLI args, return its base URL."""
    procs: list[subprocess.Popen] = []

    def _start(*args: str) -> str:
        port = free_port()
        cmd = [sys.executable, "-m", "simulator", "--port", str(port),
               "--served-model-name", MODEL, *args]
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        wait_healthy(proc, base)
        return base

    yield _start
    for proc in procs:
        stop(proc)


@pytest.fixture(scope="module")
def basic_server(start_simulator) -> str:
    """A fast simulator with default cache size and tiny modeled latencies."""
    return start_simulator("--prefill-ms-per-token", "0.01", "--decode-ms-per-token", "1")


@pytest.fixture
def inprocess_simulator() -> Iterator[Callable[..., str]]:
    """Factory: serve ``build_app(SimulatorConfig(**kw))`` with uvicorn in a thread."""
    import threading

    import uvicorn

    from simulator.app import build_app
    from simulator.config import SimulatorConfig

    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def _start(**overrides) -> str:
        config = SimulatorConfig(**{"served_model_name": MODEL, **overrides})
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(build_app(config), host="127.0.0.1", port=port,
                                               log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        servers.append((server, thread))
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("in-process simulator failed to start")
            time.sleep(0.01)
        return f"http://127.0.0.1:{port}"

    yield _start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=5)
