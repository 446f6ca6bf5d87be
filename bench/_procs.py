"""Child processes a benchmark starts: each in its own process group, all stopped on the way out.

`Processes` is a context manager; leaving it (normally, on an exception or on Ctrl-C) stops
every process it started, newest first. SIGTERM (and SIGINT, even when inherited as ignored)
are turned into KeyboardInterrupt inside the block, so `kill <bench pid>` cleans up too.
"""
from __future__ import annotations

import collections
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


# Under pytest-xdist (PYTEST_XDIST_WORKER=gw<N>) each worker takes ports from a range of its own below Linux's
# ephemeral range (32768-60999): a port one worker found free and closed, to be bound by a child a moment later,
# was otherwise handed by the kernel to the other worker's next bind(0) ("address already in use" in CI).
# The first five workers' ranges end at 21999, below the fleet's engine ports (SWITCHYARD_ENGINE_PORTS, 22000-32767).
_WORKER_PORTS = 2000
_WORKER_PORT_BASE = 12000
# The ports this process handed out last: a port is bound by its user a moment after the pick, so until then the
# next pick could find it free again and hand it out twice (bench/_run_stack.py picks the console's, the gateway's
# and its /metrics port at once: in one CI run `make run`'s gateway found its /metrics port taken).
_RECENT: collections.deque[int] = collections.deque(maxlen=256)


def free_port() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        first = _WORKER_PORT_BASE + int(worker[2:]) % 10 * _WORKER_PORTS
        for port in random.sample(range(first, first + _WORKER_PORTS), 200):
            if port in _RECENT:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _RECENT.append(port)
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, *, timeout: float = 30.0, proc: subprocess.Popen | None = None,
              headers: dict | None = None, accept=lambda status, body: status == 200, interval: float = 0.05,
              output=lambda: "") -> None:
    """Poll url until `accept(status, body)`; fail early if proc exits. Errors end with `output()`
    (e.g. the process's log)."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            command = " ".join(map(str, proc.args))  # type: ignore[arg-type]  # always started from a list
            raise RuntimeError(f"{command} exited with {proc.returncode}\n{output()}")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=1) as response:
                status, body = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, body = error.code, error.read()
        except (urllib.error.URLError, OSError) as error:
            status, body = None, str(error).encode()
        if status is not None and accept(status, body):
            return
        last = f"{status} {body[:200]!r}"
        time.sleep(interval)
    raise RuntimeError(f"{url} not ready after {timeout:.0f} s: {last}\n{output()}")


class Processes:
    """Start children in their own sessions; stop them all when the block ends."""

    def __init__(self):
        self._started: list[subprocess.Popen] = []
        self._logs: list = []
        self._previous: dict = {}

    def __enter__(self) -> "Processes":
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, _raise_keyboard_interrupt)
        return self

    def __exit__(self, *exc) -> None:
        for proc in reversed(self._started):
            stop(proc)
        for log in self._logs:
            log.close()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    def python(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        """`python <args>` from the repository root; stderr kept in a temp file for errors."""
        log = tempfile.TemporaryFile()
        self._logs.append(log)
        proc = subprocess.Popen([sys.executable, *args], cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=log, start_new_session=True)
        proc.stderr_log = log  # type: ignore[attr-defined]  # travels with the handle, for stderr_tail
        self._started.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        """Stop one child before the block ends (e.g. to start a fresh one on the same port)."""
        stop(proc)
        self._started.remove(proc)


def stop(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM the process group (engines have children), SIGKILL what lingers past `grace` seconds."""
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


def stderr_tail(proc: subprocess.Popen, limit: int = 2000) -> str:
    log = getattr(proc, "stderr_log", None)
    if log is None:
        return ""
    log.seek(0)
    return log.read().decode(errors="replace")[-limit:]


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")
