"""`make run` (scripts/run.py) stops completely — servers, worker, beat and engines — however it is stopped.

Each run is a whole embedded stack in a var/ of its own (SQLite, filesystem broker, the simulator as
the demo engine) on free ports. Every process of it, engines included, inherits that var/ in its
environment, which is how "nothing left" is checked. The stop signal lands at a different moment in
each run (starting up, just running, engine ready), because the races were in between.

SWITCHYARD_TEST_RUN_STOPS (default 1) sets how many runs per way of stopping; the issue asks for 10.
"""
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from threading import Thread

import pytest

from tests.processes import free_port

pytestmark = [pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
RUNS = int(os.environ.get("SWITCHYARD_TEST_RUN_STOPS", "1"))
MOMENTS = ("starting", "running", "engine ready")


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("run-var")


def stack_env(var_dir: Path, console_port: int, gateway_port: int) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SWITCHYARD_", "DATABASE_URL", "REDIS_URL", "CELERY_", "DJANGO_SETTINGS"))}
    return {**env, "SWITCHYARD_VAR_DIR": str(var_dir), "SWITCHYARD_CONSOLE_PORT": str(console_port),
            "SWITCHYARD_GATEWAY_PORT": str(gateway_port), "SWITCHYARD_DEMO_RUNTIME": "simulator",
            "SWITCHYARD_ENGINE_PYTHON": str(var_dir / "no-engine"),  # never a real vLLM here, whatever happens
            "SWITCHYARD_RUN_WORKER_GRACE_SECONDS": "3", "PYTHONUNBUFFERED": "1"}


def stack_pids(var_dir: Path) -> set[int]:
    """Every live process carrying this stack's var/ in its environment."""
    marker = f"SWITCHYARD_VAR_DIR={var_dir}".encode() + b"\0"
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes() and b"Z" not in (entry / "stat").read_bytes().split()[2]:
                found.add(int(entry.name))
        except OSError:
            continue
    return found


class Stack:
    """One `make run` (a Makefile of ours with just the run recipe, so make's own signal handling is real)."""

    def __init__(self, var_dir: Path, *, via_make: bool, sigint_ignored: bool):
        self.var_dir, self.log = var_dir, var_dir / f"run-{time.monotonic_ns()}.out"
        env = stack_env(var_dir, free_port(), free_port())
        argv = [sys.executable, str(REPO / "scripts" / "run.py")]
        if via_make:
            makefile = var_dir / "Makefile"
            makefile.write_text(f"run:\n\t{sys.executable} {REPO / 'scripts' / 'run.py'}\n")
            argv = ["make", "-s", "-f", str(makefile), "run"]
        # Started like `cmd &` from a script: SIGINT arrives ignored, and run.py must still honour it.
        preexec = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, preexec_fn=preexec)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, moment: str, timeout: float = 240) -> None:
        text = {"starting": None, "running": "Switchyard is running", "engine ready": "(ready; instance"}[moment]
        deadline = time.monotonic() + timeout
        while text and text not in self.output():
            assert self.proc.poll() is None, f"make run exited early:\n{self.output()}"
            assert time.monotonic() < deadline, f"no {text!r} within {timeout} s:\n{self.output()}"
            time.sleep(0.3)
        if moment == "starting":
            time.sleep(1.5)  # migrate / seed under way, or the first servers just forked

    def run_py_pid(self) -> int:
        if self.proc.args[0] != "make":
            return self.proc.pid
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return int(children[0])

    def stopped(self, run_py: int, timeout: float = 90) -> int:
        """make's (or run.py's) exit code, once run.py itself is gone too (make may die first)."""
        try:
            code = self.proc.wait(timeout=timeout)
            deadline = time.monotonic() + timeout
            while Path(f"/proc/{run_py}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            return code
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)


def assert_nothing_left(var_dir: Path, stack: Stack) -> None:
    deadline = time.monotonic() + 3  # a process killed a moment ago may still be exiting
    while stack_pids(var_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = stack_pids(var_dir)
    commands = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120] for pid in left}
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"left running: {commands}\n{stack.output()[-3000:]}"


WAYS = {
    "SIGINT to run.py started from a script": dict(via_make=False, sigint_ignored=True, group=False, sig=signal.SIGINT),
    "SIGTERM to run.py": dict(via_make=False, sigint_ignored=False, group=False, sig=signal.SIGTERM),
    "SIGTERM to make run's process group": dict(via_make=True, sigint_ignored=False, group=True, sig=signal.SIGTERM),
}


@pytest.mark.parametrize("way", list(WAYS))
def test_make_run_stops_everything(var_dir, way):
    spec = WAYS[way]
    for run in range(RUNS):
        stack = Stack(var_dir, via_make=spec["via_make"], sigint_ignored=spec["sigint_ignored"])
        stack.wait_for(MOMENTS[(run + list(WAYS).index(way)) % len(MOMENTS)])
        run_py = stack.run_py_pid()
        if spec["group"]:
            os.killpg(stack.proc.pid, spec["sig"])
        else:
            os.kill(run_py, spec["sig"])
        code = stack.stopped(run_py)
        # run.py: 0, or 1 when stopped before it was up ("stopped while starting"); make dies of the signal.
        assert code in ((0, 1, -spec["sig"]) if spec["via_make"] else (0, 1)), stack.output()
        assert_nothing_left(var_dir, stack)


class _OtherStack(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}')

    def log_message(self, *args):
        pass


def test_make_run_refuses_ports_another_stack_answers_on(var_dir):
    other = HTTPServer(("127.0.0.1", 0), _OtherStack)
    Thread(target=other.serve_forever, daemon=True).start()
    try:
        port = other.server_address[1]
        env = {**stack_env(var_dir, port, free_port())}
        done = subprocess.run([sys.executable, str(REPO / "scripts" / "run.py")], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)
    finally:
        other.shutdown()
    assert done.returncode == 1
    assert f"port {port} (console) is already in use" in done.stderr and "SWITCHYARD_CONSOLE_PORT" in done.stderr
    assert "Switchyard is running" not in done.stdout
    assert stack_pids(var_dir) == set()
