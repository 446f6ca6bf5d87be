"""`make run`: migrate, seed the demo, start every Switchyard process, print where they are.

Processes (logs in var/log/): the console + REST API (uvicorn), the gateway (`python -m gateway`),
a private redis-server for the gateway when no Redis is configured (scripts/private_redis.py), a
Celery worker with embedded beat that starts the demo's engine (real vLLM from .venv-engine, or the
simulator where the engine cannot be built; SWITCHYARD_DEMO_RUNTIME=simulator|local forces one).
Ctrl-C, SIGTERM or a SIGTERM to the whole process group stops them all, this install's engines
included — and nothing of another install on the host.

Signals only set a flag: the stop path runs exactly once, to the end, however many signals arrive
(`make` forwards its own SIGTERM, so a group SIGTERM reaches us twice).
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit


class StopRequest:
    """A flag a signal handler sets without taking a lock, and a wait on it (main thread only).

    Not threading.Event: its set() takes the lock its wait() holds for a moment, and a handler runs in
    the main thread between two bytecodes — a signal landing inside STOP.wait() blocked set() on a lock
    its own thread held, forever, so a process-group SIGTERM could leave the whole stack running.
    """

    POLL_SECONDS = 0.1

    def __init__(self):
        self.requested = False

    def set(self) -> None:
        self.requested = True

    def is_set(self) -> bool:
        return self.requested

    def wait(self, seconds: float) -> bool:
        """True as soon as a stop is requested (within POLL_SECONDS), else False after `seconds`."""
        deadline = time.monotonic() + seconds
        while not self.requested and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(self.POLL_SECONDS, left))
        return self.requested


STOP = StopRequest()


def _request_stop(signum, frame):
    STOP.set()


# Before the slower imports below: from here on a signal only sets the flag (also SIGINT inherited
# as ignored, `cmd &` in a script), and main() acts on it whenever it arrived.
for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(_sig, _request_stop)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from controlplane.env import env_float, env_int, env_str  # noqa: E402
from fleet.runtime import sockets  # noqa: E402  (Django-free: usable before anything is configured)
from scripts import private_redis  # noqa: E402

VAR_DIR = Path(env_str("SWITCHYARD_VAR_DIR", str(ROOT / "var")))
LOG_DIR = VAR_DIR / "log"
HOST = env_str("SWITCHYARD_HOST", "127.0.0.1")
ENGINE_WAIT_SECONDS = env_int("SWITCHYARD_ENGINE_WAIT_SECONDS", 600, minimum=1)
# A warm shutdown of the worker takes ~2 s (it waits for running tasks); fleet tasks are idempotent
# and transactional, so one that outlasts this grace is killed and the next reconcile redoes it.
WORKER_GRACE_SECONDS = env_float("SWITCHYARD_RUN_WORKER_GRACE_SECONDS", 10.0)
SERVER_GRACE_SECONDS = 10.0
# How often a line says the engine is still starting when the output is not a terminal (a log, a pipe).
PROGRESS_LINE_SECONDS = 30
PY = sys.executable


class CannotStart(Exception):
    """A clear reason `make run` gives up (printed without a traceback)."""


def main() -> int:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    children: dict[str, subprocess.Popen] = {}
    try:
        return run(children)
    except CannotStart as exc:
        say(f"make run: {exc}")
        return 1
    finally:
        stop_all(children)


def run(children: dict) -> int:
    console_port = choose_port("console", "SWITCHYARD_CONSOLE_PORT", 8000)
    gateway_port = choose_port("gateway", "SWITCHYARD_GATEWAY_PORT", 8001)
    metrics_port = choose_port("gateway metrics", "SWITCHYARD_GATEWAY_METRICS_PORT", 9101)
    redis_note = start_redis(children)  # first: every later step may publish to the gateway's change bus
    manage("migrate", "--noinput", "-v", "0")
    manage("collectstatic", "--noinput", "-v", "0")  # WhiteNoise serves the hashed, compressed copies
    seed = seed_values()
    start(children, "console", [PY, "-m", "uvicorn", "controlplane.asgi:application", "--host", HOST,
                                "--port", str(console_port), "--no-access-log"])
    start(children, "gateway", [PY, "-m", "gateway", "--host", HOST, "--port", str(gateway_port),
                                "--metrics-host", HOST, "--metrics-port", str(metrics_port)])
    start(children, "worker", [PY, "-m", "celery", "-A", "controlplane", "worker", "-B", "-l", "info",
                               "--concurrency", "2"])
    base = f"http://{HOST}:{console_port}"
    wait_ours("console", children["console"], f"{base}/healthz", console_port)
    wait_ours("gateway", children["gateway"], f"http://{HOST}:{gateway_port}/healthz", gateway_port)
    print_summary(base, gateway_port, metrics_port, seed, redis_note)
    report_engine(base, seed["api_key"], children, seed.get("runtime", ""))
    while not STOP.is_set() and _all_alive(children):
        STOP.wait(1)
    if STOP.is_set():
        return 0
    dead = [name for name, proc in children.items() if proc.poll() is not None]
    print(f"stopped: {', '.join(dead)} exited; see {LOG_DIR}", file=sys.stderr)
    return 1


def choose_port(name: str, variable: str, default: int) -> int:
    """The configured port, refused with a clear message when taken; 0 picks a free one."""
    port = env_int(variable, default, minimum=0, maximum=65535)
    if port == 0:
        return free_port()
    if sockets.port_in_use(port, HOST):
        raise CannotStart(
            f"port {port} ({name}) is already in use — another Switchyard install or another program listens "
            f"there. Stop it, or choose other ports, e.g. SWITCHYARD_CONSOLE_PORT=8100 SWITCHYARD_GATEWAY_PORT=8101 "
            f"SWITCHYARD_GATEWAY_METRICS_PORT=9111 "
            f"make run ({variable}=0 picks a free port).")
    return port


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def start_redis(children: dict) -> str:
    """The gateway's Redis: the configured one, else a private redis-server (scripts/private_redis.py).
    Returns its line of the summary."""
    if private_redis.configured():
        return "the configured one (REDIS_URL / SWITCHYARD_GATEWAY_REDIS_URL)"
    if private_redis.binary() is None:
        return ("NONE: redis-server is not installed and REDIS_URL is unset, so the gateway refuses inference "
                "(503 redis_not_configured); install redis-server or set REDIS_URL")
    port = free_port()
    argv, url = private_redis.plan(VAR_DIR / "redis", port)
    start(children, "redis", argv)
    deadline = time.monotonic() + 20
    password = urlsplit(url).password or ""
    while not private_redis.answers(port, password):
        if children["redis"].poll() is not None or time.monotonic() > deadline:
            raise CannotStart(f"the private redis-server did not start; see {LOG_DIR / 'redis.log'}")
        if STOP.wait(0.1):
            raise CannotStart("stopped while redis-server was starting")
    os.environ["SWITCHYARD_GATEWAY_REDIS_URL"] = url  # every child from here on inherits it
    return f"private redis-server on 127.0.0.1:{port} (password in {VAR_DIR / 'redis'}; stops with the rest)"


def manage(*args: str, capture: bool = False) -> str:
    """A manage.py step; a stop request ends it (SIGTERM) instead of waiting it out."""
    proc = subprocess.Popen([PY, "manage.py", *args], cwd=ROOT, text=True, start_new_session=True,
                            stdout=subprocess.PIPE if capture else None, preexec_fn=_die_with_parent)
    out: list[str] = []
    stdout = proc.stdout  # a pipe only when capturing
    reader = threading.Thread(target=lambda: out.append(stdout.read()), daemon=True) if stdout else None
    if reader:
        reader.start()
    while proc.poll() is None:
        if STOP.wait(0.2):
            proc.terminate()
            proc.wait()
            raise CannotStart(f"stopped during `manage.py {args[0]}`")
    if reader:
        reader.join()
    if proc.returncode != 0:
        raise CannotStart(f"`manage.py {' '.join(args)}` failed (exit {proc.returncode})")
    return "".join(out)


def start(children: dict, name: str, argv: list[str]) -> None:
    """Start a child in its own process group (stopping the group stops whatever it forked)."""
    if STOP.is_set():
        raise CannotStart("stopped while starting")
    with open(LOG_DIR / f"{name}.log", "ab") as log:
        children[name] = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True,
                                          preexec_fn=_die_with_parent)


def _die_with_parent() -> None:
    """In the child: SIGTERM when run.py dies without its stop path (SIGKILL), so no server outlives it."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def wait_ours(name: str, proc: subprocess.Popen, url: str, port: int, seconds: float = 60) -> None:
    """Until `url` answers *and* the socket on `port` belongs to our child's process group.

    Another stack answering the same /healthz is not us: it may have taken the port between our
    check and our server's bind, and then our server has exited.
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CannotStart(f"the {name} exited (code {proc.returncode}); see {LOG_DIR / (name + '.log')}")
        if _answers(url) and sockets.listened_by(port, sockets.group_members(proc.pid)):
            return
        if STOP.wait(0.3):
            raise CannotStart(f"stopped while the {name} was starting")
    raise CannotStart(f"the {name} did not answer on port {port} within {seconds:.0f} s; see {LOG_DIR}")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # it answered: a gateway without Redis says 503, and why
    except OSError:
        return False


def stop_all(children: dict) -> None:
    """Stop the worker first (so it starts nothing new), then the servers, then this install's engines."""
    say("stopping…")
    # The worker alone gets the SIGTERM: Celery then stops its pool and beat in order. Its pool
    # processes must not get one too (a child killed while holding the pool's queue lock used to
    # leave the worker waiting for it forever); what is left after the grace is killed.
    _stop_group(children.get("worker"), WORKER_GRACE_SECONDS, leader_only=True)
    servers = [children[name] for name in ("console", "gateway") if name in children]
    for proc in servers:
        _signal_group(proc, signal.SIGTERM)
    for proc in servers:
        _stop_group(proc, SERVER_GRACE_SECONDS)
    # Its own session: a second Ctrl-C at the terminal must not kill the engine clean-up half-way.
    subprocess.run([PY, "manage.py", "fleet_stop_engines"], cwd=ROOT, check=False, start_new_session=True)
    _stop_group(children.get("redis"), SERVER_GRACE_SECONDS)  # last: until here anything may still publish
    say("stopped")


def say(message: str) -> None:
    """A line on stderr that cannot break the stop path (the terminal or pipe may be gone)."""
    try:
        print(message, file=sys.stderr, flush=True)
    except OSError:
        pass


def _stop_group(proc: subprocess.Popen | None, grace: float, *, leader_only: bool = False) -> None:
    """SIGTERM the child's group (or only the child), SIGKILL the group after `grace`; wait until the child is
    reaped."""
    if proc is None:
        return
    if leader_only:
        proc.send_signal(signal.SIGTERM)  # a no-op once it has exited and been reaped
    else:
        _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)  # whatever of the group is left (pool processes, a forked helper)
    proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def seed_values() -> dict:
    """Run seed_demo and read its `SEED name=value` lines."""
    args = ["seed_demo", "--runtime", os.environ.get("SWITCHYARD_DEMO_RUNTIME", "auto")]
    if os.environ.get("RESET_ADMIN"):
        args.append("--reset-admin-password")
    lines = manage(*args, capture=True).splitlines()
    return dict(line[5:].split("=", 1) for line in lines if line.startswith("SEED "))


def print_summary(base: str, gateway_port: int, metrics_port: int, seed: dict, redis_note: str) -> None:
    print("\nSwitchyard is running (Ctrl-C stops everything)\n")
    print(f"  console      {base}/console/")
    print(f"  API docs     {base}/api/docs/")
    print(f"  REST API     {base}/api/v1/")
    print(f"  admin user   {seed['admin_user']}   password: {seed['admin_password']}")
    print(f"  gateway      http://{HOST}:{gateway_port}/v1   (OpenAI-compatible; model: tiny-coder)")
    print(f"  metrics      http://{HOST}:{metrics_port}/metrics   (Prometheus; the gateway's, this host only)")
    print(f"  demo tenant  {seed['tenant']}   API key (shown once): {seed['api_key']}")
    print(f"  redis        {redis_note}")
    if seed.get("runtime") == "simulator":
        print("  NOTICE       the demo engine is the simulator (no vLLM engine virtualenv, or "
              "SWITCHYARD_DEMO_RUNTIME=simulator)")
    print(f"  logs         {LOG_DIR}/\n", flush=True)


def report_engine(base: str, api_key: str, children: dict, runtime: str) -> None:
    """Wait until the demo deployment has a ready instance, showing the time spent; print its URL."""
    expected = ("the simulator takes a few seconds" if runtime == "simulator"
                else "real vLLM on the CPU takes 1–3 minutes")
    print(f"  engine       starting ({expected}) …", flush=True)
    started = time.monotonic()
    progress = _Progress(sys.stdout.isatty())
    while time.monotonic() - started < ENGINE_WAIT_SECONDS and not STOP.is_set() and _all_alive(children):
        instances = _demo_instances(base, api_key)
        ready = [i for i in instances if i.get("state") == "ready"]
        elapsed = time.monotonic() - started
        if ready:
            progress.done(f"  engine       {ready[0]['endpoint_url']}  "
                          f"(ready after {elapsed:.0f} s; instance {ready[0]['id']})\n")
            return
        progress.show(elapsed, f"  engine       starting … {elapsed:.0f} s{_engine_state(instances)}")
        STOP.wait(3)
    if STOP.is_set():
        progress.end()
    else:
        progress.done(f"  engine       not ready yet; see {LOG_DIR}/worker.log and {LOG_DIR}/engines/\n")


class _Progress:
    """One line rewritten in place on a terminal; elsewhere (a log, a pipe) a new line now and then."""

    def __init__(self, terminal: bool):
        self.terminal, self.last_line_at, self.open = terminal, 0.0, False

    def show(self, elapsed: float, text: str) -> None:
        if self.terminal:
            self.open = True
            print(f"\r\033[K{text}", end="", flush=True)
        elif elapsed - self.last_line_at >= PROGRESS_LINE_SECONDS:
            self.last_line_at = elapsed
            print(text, flush=True)

    def done(self, text: str) -> None:
        print(f"\r\033[K{text}" if self.terminal else text, flush=True)
        self.open = False

    def end(self) -> None:
        """Leaves the line rewritten in place as it is (what follows starts on a line of its own)."""
        if self.open:
            print(flush=True)
            self.open = False


def _engine_state(instances: list) -> str:
    """What the instance is doing, when it says more than "starting" (e.g. waiting for room on the host)."""
    if not instances:
        return ""
    first = instances[0]
    reason = f": {first['pending_reason']}" if first.get("pending_reason") else ""
    return f"  (instance {first['id']} {first.get('state')}{reason})"


def _all_alive(children: dict) -> bool:
    return all(proc.poll() is None for proc in children.values())


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
