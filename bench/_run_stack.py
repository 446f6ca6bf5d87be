"""`make run` (scripts/run.py) started as a user starts it, stopped the ways a user stops it, and what it leaves.

Each stack is a whole embedded install in a var/ of its own (SQLite, the filesystem broker, the
simulator as the demo engine) on free ports. Every process of it, engines included, inherits that
var/ in its environment: that marker — never a name or a port — is how what is left is found, so
nothing else on the host (another install, another test) is ever looked at as ours or signalled.
Used by tests/fleet/test_run_script.py (a few rounds) and scripts/stop_trial.py (the issue's 10).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench._procs import REPO_ROOT, free_port
from fleet.runtime import sockets

RUN_PY = REPO_ROOT / "scripts" / "run.py"
# The stop signal lands at a different moment in each round (still starting, just up, engine ready):
# the races were in between.
MOMENTS = ("starting", "running", "engine ready")
EXIT_DEADLINE_SECONDS = 90  # a deadline for "it stopped at all", not a timing assertion


@dataclass(frozen=True)
class Way:
    """How a user stops it: which signal, to run.py or to make run's whole process group."""
    sig: int
    via_make: bool = False
    group: bool = False
    sigint_ignored: bool = False  # started like `cmd &` from a script: SIGINT arrives ignored


WAYS = {
    "SIGINT to run.py started from a script": Way(signal.SIGINT, sigint_ignored=True),
    "SIGTERM to run.py": Way(signal.SIGTERM),
    "SIGTERM to make run's process group": Way(signal.SIGTERM, via_make=True, group=True),
    "Ctrl-C at a terminal (SIGINT to make run's process group)": Way(signal.SIGINT, via_make=True, group=True),
}


@dataclass
class Stopped:
    """One stop: exit code (make's when via make), seconds from the signal until run.py was gone, and
    whatever of the stack outlived it (processes by pid → command line, ports still listened on)."""
    code: int | None
    seconds: float
    left: dict[int, str] = field(default_factory=dict)
    busy_ports: list[int] = field(default_factory=list)
    output: str = ""

    def expected_code(self, way: Way) -> bool:
        # run.py: 0, or 1 when stopped before it was up ("stopped while starting"); make may die of the signal.
        return self.code in ((0, 1, 2, -way.sig) if way.via_make else (0, 1))

    @property
    def clean(self) -> bool:
        return not self.left and not self.busy_ports


def embedded_env(var_dir: Path) -> dict:
    """The environment of an embedded install in `var_dir` (nothing inherited that could point it elsewhere)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SWITCHYARD_", "DATABASE_URL", "REDIS_URL", "CELERY_", "DJANGO_SETTINGS"))}
    return {**env, "SWITCHYARD_VAR_DIR": str(var_dir), "PYTHONUNBUFFERED": "1"}


def stack_env(var_dir: Path, console_port: int, gateway_port: int, metrics_port: int = 0) -> dict:
    """One isolated `make run`: its own var/ and ports (metrics: a free one unless given), the simulator engine."""
    return {**embedded_env(var_dir), "SWITCHYARD_CONSOLE_PORT": str(console_port),
            "SWITCHYARD_GATEWAY_PORT": str(gateway_port), "SWITCHYARD_GATEWAY_METRICS_PORT": str(metrics_port),
            "SWITCHYARD_DEMO_RUNTIME": "simulator",
            "SWITCHYARD_ENGINE_PYTHON": str(var_dir / "no-engine")}  # never a real vLLM here, whatever happens


def stack_processes(var_dir: Path) -> dict[int, str]:
    """Every live process carrying this stack's var/ in its environment: pid → command line."""
    marker = f"SWITCHYARD_VAR_DIR={var_dir}".encode() + b"\0"
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes() and b"Z" not in (entry / "stat").read_bytes().split()[2]:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")[:120].decode()
        except OSError:
            continue
    return found


class Stack:
    """One `make run` in `var_dir`; leaving the block kills whatever of it is still alive."""

    def __init__(self, var_dir: Path, way: Way, extra_env: dict | None = None):
        self.var_dir, self.way = var_dir, way
        self.log = var_dir / f"run-{time.monotonic_ns()}.out"
        self.ports = [free_port(), free_port(), free_port()]  # console, gateway, gateway metrics
        argv = [sys.executable, str(RUN_PY)]
        if way.via_make:  # a Makefile of ours with just the run recipe, so make's own signal handling is real
            makefile = var_dir / "Makefile"
            makefile.write_text(f"run:\n\t{sys.executable} {RUN_PY}\n")
            argv = ["make", "-s", "-f", str(makefile), "run"]
        preexec = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if way.sigint_ignored else None
        with open(self.log, "wb") as out:
            env = {**stack_env(var_dir, *self.ports), **(extra_env or {})}
            self.proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, preexec_fn=preexec)

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc) -> None:
        self._kill(stack_processes(self.var_dir))
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, moment: str, timeout: float = 240) -> None:
        text = {"starting": None, "running": "Switchyard is running", "engine ready": "(ready after"}[moment]
        deadline = time.monotonic() + timeout
        while text and text not in self.output():
            if self.proc.poll() is not None:
                raise RuntimeError(f"make run exited early:\n{self.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {text!r} within {timeout} s:\n{self.output()}")
            time.sleep(0.3)
        if moment == "starting":
            time.sleep(1.5)  # migrate / seed under way, or the first servers just forked

    def stop(self) -> Stopped:
        """Stop it the stack's way; then what is left of it (killed once recorded)."""
        run_py = self._run_py_pid()
        ports = self.ports + self._engine_ports()
        started = time.monotonic()
        if self.way.group:
            os.killpg(self.proc.pid, self.way.sig)
        else:
            os.kill(run_py, self.way.sig)
        code = self._wait_gone(run_py)
        seconds = time.monotonic() - started
        left = self._leftovers()
        self._kill(left)
        busy = [port for port in ports if sockets.port_in_use(port)]
        return Stopped(code, seconds, left, busy, self.output())

    def _run_py_pid(self) -> int:
        if not self.way.via_make:
            return self.proc.pid
        return int(Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()[0])

    def _engine_ports(self) -> list[int]:
        """The engine's port, and the private redis-server's (scripts/private_redis.py), as the summary prints them."""
        output = self.output()
        return [int(port) for port in re.findall(r"engine +http://[^:\s]+:(\d+)", output)
                + re.findall(r"redis +private redis-server on [^:\s]+:(\d+)", output)]

    def _wait_gone(self, run_py: int) -> int | None:
        """make's (or run.py's) exit code, once run.py itself is gone too (make may die first)."""
        deadline = time.monotonic() + EXIT_DEADLINE_SECONDS
        try:
            code = self.proc.wait(timeout=EXIT_DEADLINE_SECONDS)
        except subprocess.TimeoutExpired:
            return None
        while Path(f"/proc/{run_py}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return code

    def _leftovers(self) -> dict[int, str]:
        deadline = time.monotonic() + 3  # a process killed a moment ago may still be exiting
        while stack_processes(self.var_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        return stack_processes(self.var_dir)

    @staticmethod
    def _kill(pids) -> None:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def stop_once(var_dir: Path, way: Way, moment: str) -> Stopped:
    """Start a stack, wait for `moment`, stop it `way`."""
    with Stack(var_dir, way) as stack:
        stack.wait_for(moment)
        return stack.stop()
