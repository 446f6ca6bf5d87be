"""`make run`: migrate, seed the demo, start every Switchyard process, print where they are.

Processes (logs in var/log/): the console + REST API (uvicorn), the gateway (`python -m gateway`),
a Celery worker with embedded beat that starts the demo's engine (real vLLM from .venv-engine, or
the simulator where the engine cannot be built). Ctrl-C stops them all, engines included.
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG_DIR = ROOT / "var" / "log"
HOST = os.environ.get("SWITCHYARD_HOST", "127.0.0.1")
CONSOLE_PORT = int(os.environ.get("SWITCHYARD_CONSOLE_PORT", "8000"))
GATEWAY_PORT = int(os.environ.get("SWITCHYARD_GATEWAY_PORT", "8001"))
ENGINE_WAIT_SECONDS = int(os.environ.get("SWITCHYARD_ENGINE_WAIT_SECONDS", "600"))
PY = sys.executable


def manage(*args: str, capture: bool = False) -> str:
    result = subprocess.run([PY, "manage.py", *args], cwd=ROOT, check=True, text=True,
                            capture_output=capture)
    return result.stdout if capture else ""


def start(name: str, argv: list[str]) -> subprocess.Popen:
    log = open(LOG_DIR / f"{name}.log", "ab")
    # A process group per child, so stopping it also stops whatever it forked.
    return subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def wait_http(url: str, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except OSError:
            time.sleep(0.3)
    return False


def stop_all(children: dict) -> None:
    """Stop our processes, then the engines the worker started (they run in their own sessions)."""
    # A second Ctrl-C must not cut the clean-up short and leave orphans behind.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("stopping…", file=sys.stderr, flush=True)
    for proc in children.values():
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for proc in children.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    subprocess.run([PY, "manage.py", "fleet_stop_engines"], cwd=ROOT, check=False)


def seed_values() -> dict:
    """Run seed_demo and read its `SEED name=value` lines."""
    args = ["seed_demo"] + (["--reset-admin-password"] if os.environ.get("RESET_ADMIN") else [])
    lines = manage(*args, capture=True).splitlines()
    return dict(line[5:].split("=", 1) for line in lines if line.startswith("SEED "))


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the children too, not just us
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    manage("migrate", "--noinput", "-v", "0")
    seed = seed_values()
    children = {
        "console": start("console", [PY, "-m", "uvicorn", "controlplane.asgi:application", "--host", HOST,
                                     "--port", str(CONSOLE_PORT), "--no-access-log"]),
        "gateway": start("gateway", [PY, "-m", "gateway", "--host", HOST, "--port", str(GATEWAY_PORT)]),
        "worker": start("worker", [PY, "-m", "celery", "-A", "controlplane", "worker", "-B", "-l", "info",
                                   "--concurrency", "2", "-s", str(ROOT / "var" / "celerybeat-schedule")]),
    }
    base = f"http://{HOST}:{CONSOLE_PORT}"
    try:
        if not wait_http(f"{base}/healthz"):
            print(f"console did not start; see {LOG_DIR / 'console.log'}", file=sys.stderr)
            return 1
        print_summary(base, seed)
        report_engine(base, seed["api_key"], children)
        while all(proc.poll() is None for proc in children.values()):
            time.sleep(1)
        dead = [name for name, proc in children.items() if proc.poll() is not None]
        print(f"stopped: {', '.join(dead)} exited; see {LOG_DIR}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop_all(children)


def print_summary(base: str, seed: dict) -> None:
    print("\nSwitchyard is running (Ctrl-C stops everything)\n")
    print(f"  console      {base}/console/")
    print(f"  API docs     {base}/api/docs/")
    print(f"  REST API     {base}/api/v1/")
    print(f"  admin user   {seed['admin_user']}   password: {seed['admin_password']}")
    print(f"  gateway      http://{HOST}:{GATEWAY_PORT}/v1   (OpenAI-compatible; model: tiny-coder)")
    print(f"  demo tenant  {seed['tenant']}   API key (shown once): {seed['api_key']}")
    if seed.get("runtime") == "simulator":
        print("  NOTICE       the vLLM engine virtualenv is missing: the demo engine is the simulator")
    print(f"  logs         {LOG_DIR}/\n", flush=True)


def report_engine(base: str, api_key: str, children: dict) -> None:
    """Wait (printing progress) until the demo deployment has a ready instance; print its URL."""
    print("  engine       starting (real vLLM on the CPU takes about a minute) …", flush=True)
    deadline = time.monotonic() + ENGINE_WAIT_SECONDS
    while time.monotonic() < deadline and all(proc.poll() is None for proc in children.values()):
        ready = [i for i in _demo_instances(base, api_key) if i.get("state") == "ready"]
        if ready:
            print(f"  engine       {ready[0]['endpoint_url']}  (ready; instance {ready[0]['id']})\n", flush=True)
            return
        time.sleep(3)
    print(f"  engine       not ready yet; see {LOG_DIR}/worker.log and var/log/engines/\n", flush=True)


def _demo_instances(base: str, api_key: str) -> list:
    request = urllib.request.Request(f"{base}/api/v1/deployments/", headers={"Authorization": f"Bearer {api_key}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            body = json.load(response)
    except (OSError, ValueError):
        return []
    return [inst for dep in body.get("results", []) for inst in dep.get("instances", [])]


if __name__ == "__main__":
    sys.exit(main())
