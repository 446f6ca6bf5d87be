"""`make run` (scripts/run.py) stops completely — servers, worker, beat and engines — however it is stopped.

The stacks and their clean-up are bench/_run_stack.py's (scripts/stop_trial.py runs the issue's 10
rounds per way and times them). After every stop no process carrying the stack's var/ may be left and
its ports (console, gateway, engine) must be free.

SWITCHYARD_TEST_RUN_STOPS (default 2) sets how many rounds per way of stopping.
"""
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from threading import Thread

import pytest

from bench._run_stack import MOMENTS, RUN_PY, WAYS, stack_env, stack_processes, stop_once
from tests.processes import free_port

pytestmark = [pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
RUNS = int(os.environ.get("SWITCHYARD_TEST_RUN_STOPS", "2"))


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("run-var")


@pytest.mark.parametrize("name", list(WAYS))
def test_make_run_stops_everything(var_dir, name):
    way = WAYS[name]
    for run in range(RUNS):
        moment = MOMENTS[(run + list(WAYS).index(name)) % len(MOMENTS)]
        stopped = stop_once(var_dir, way, moment)
        assert stopped.code is not None, f"still running {stopped.seconds:.0f} s after {name}:\n{stopped.output}"
        assert stopped.expected_code(way), stopped.output
        assert stopped.left == {}, f"left running after {name} at {moment!r}\n{stopped.output[-3000:]}"
        assert stopped.busy_ports == [], f"ports still listened on after {name} at {moment!r}"


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
        done = subprocess.run([sys.executable, str(RUN_PY)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)
    finally:
        other.shutdown()
    assert done.returncode == 1
    assert f"port {port} (console) is already in use" in done.stderr and "SWITCHYARD_CONSOLE_PORT" in done.stderr
    assert "Switchyard is running" not in done.stdout
    assert stack_processes(var_dir) == {}
