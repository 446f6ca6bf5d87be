"""Fixtures that run the simulator as a real subprocess (``python -m simulator``)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# Make ``simulator`` and ``sim_helpers`` importable whatever pytest's import
# mode or rootdir configuration is.
for _path in (str(REPO_ROOT), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from sim_helpers import MODEL  # noqa: E402

from tests import processes  # noqa: E402


@pytest.fixture(scope="session")
def start_simulator() -> Iterator[Callable[..., str]]:
    """Factory: start ``python -m simulator`` with extra CLI args, return its base URL."""
    procs: list[subprocess.Popen] = []

    def _start(*args: str) -> str:
        proc, base = processes.start_simulator(MODEL, *args)
        procs.append(proc)
        return base

    yield _start
    for proc in procs:
        processes.stop(proc, grace=5)


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
        port = processes.free_port()
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
