"""Local engine processes: launch in their own session, find them by tag, kill whole groups.

Each engine carries its install namespace and instance id in its environment; the tags are
inherited by the engine's children (vLLM forks an EngineCore), so one /proc scan finds every
process of an instance even after the worker that launched it is gone.
"""
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from django.conf import settings

NAMESPACE_VAR = "SWITCHYARD_FLEET_NAMESPACE"
INSTANCE_VAR = "SWITCHYARD_INSTANCE_ID"
PORT_VAR = "SWITCHYARD_INSTANCE_PORT"


def free_port() -> int:
    """An unused TCP port; another process may take it before the engine binds (accepted: start fails, back-off retries)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def log_path(instance_id: int) -> Path:
    return Path(settings.SWITCHYARD_ENGINE_LOG_DIR) / f"instance-{instance_id}.log"


def spawn(argv: list[str], *, instance_id: int, port: int, extra_env: dict, cwd: str) -> dict:
    """Launch `argv` as a new session leader, output to the instance's log; return its handle."""
    path = log_path(instance_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **extra_env, NAMESPACE_VAR: settings.SWITCHYARD_FLEET_NAMESPACE,
           INSTANCE_VAR: str(instance_id), PORT_VAR: str(port)}
    with open(path, "ab") as log:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    proc.returncode = 0  # we reap it ourselves (reap()); stops Popen.__del__ from warning
    return {"pid": proc.pid, "pgid": proc.pid, "start_time": start_time(proc.pid), "log": str(path), "port": port}


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after "pid (comm)" (state first), or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return raw[raw.rindex(")") + 2:].split()  # fields after "pid (comm) "


def start_time(pid: int) -> int | None:
    """Kernel start time of `pid` in clock ticks: with the pid, a process identity that survives reuse."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None


def reap(pid: int) -> None:
    """Collect the exit status if the engine is our child, so it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def alive(handle: dict) -> bool:
    """Whether the handle's leader process still runs (same pid *and* start time, not a zombie)."""
    pid = handle.get("pid")
    if not pid:
        return False
    reap(pid)
    fields = stat_fields(pid)
    return bool(fields) and fields[0] != "Z" and int(fields[19]) == handle.get("start_time")


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs
            if k in (NAMESPACE_VAR.encode(), INSTANCE_VAR.encode(), PORT_VAR.encode())}


def tagged_processes() -> dict[int, list[dict]]:
    """Instance id → its live processes (pid, pgid, start time, port) in this namespace."""
    found: dict[int, list[dict]] = {}
    namespace = settings.SWITCHYARD_FLEET_NAMESPACE
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        env = _environ(int(entry.name))
        if env.get(NAMESPACE_VAR) != namespace or INSTANCE_VAR not in env:
            continue
        fields = stat_fields(int(entry.name))
        if fields and fields[0] != "Z":
            found.setdefault(int(env[INSTANCE_VAR]), []).append(
                {"pid": int(entry.name), "pgid": int(fields[2]), "start_time": int(fields[19]),
                 "port": int(env.get(PORT_VAR) or 0)})
    return found


def leader_handle(processes: list[dict]) -> dict | None:
    """The session leader among an instance's processes (the one we launched), if it is still there."""
    for proc in processes:
        if proc["pid"] == proc["pgid"]:
            return proc
    return None


def kill_instance(instance_id: int, grace: float) -> None:
    """SIGTERM every process group of the instance, SIGKILL whatever is left after `grace`."""
    _signal_groups(instance_id, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while tagged_processes().get(instance_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    if tagged_processes().get(instance_id):
        _signal_groups(instance_id, signal.SIGKILL)
        _wait_gone(instance_id, 10.0)


def _signal_groups(instance_id: int, sig: int) -> None:
    # Only groups that hold a process tagged with this instance: a recycled pgid is never signalled.
    for proc in tagged_processes().get(instance_id, []):
        try:
            os.killpg(proc["pgid"], sig)
        except (ProcessLookupError, PermissionError):
            pass
        reap(proc["pid"])


def _wait_gone(instance_id: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        procs = tagged_processes().get(instance_id, [])
        for proc in procs:
            reap(proc["pid"])
        if not procs:
            return
        time.sleep(0.1)


def read_tail(path: str | None, lines: int) -> str:
    """The last `lines` lines of a log file (reads at most 64 KiB from its end)."""
    if not path or not Path(path).exists():
        return ""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - 65536))
        text = handle.read().decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])
