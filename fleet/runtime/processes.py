"""Local engine processes: launch in their own session, find them by tag, kill whole groups.

Each engine carries its install's namespace and token and its instance id in its environment;
the tags are inherited by the engine's children (vLLM forks an EngineCore), so one /proc scan
finds every process of an instance even after the worker that launched it is gone. Only a
process carrying our namespace *and* our token is ours: another install on the host has its
own (and the same instance ids), and is never adopted or signalled.
"""
import hmac
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

NAMESPACE_VAR = "SWITCHYARD_FLEET_NAMESPACE"
TOKEN_VAR = "SWITCHYARD_ENGINE_TOKEN"
INSTANCE_VAR = "SWITCHYARD_INSTANCE_ID"
PORT_VAR = "SWITCHYARD_INSTANCE_PORT"
BACKEND_VAR = "SWITCHYARD_RUNTIME_BACKEND"  # which configured backend launched it (it reports and stops it)
# What the engine was admitted with (fleet/runtime/capacity.py), read back by every install's admission.
MEMORY_VAR = "SWITCHYARD_ENGINE_MEMORY_BYTES"
CPUS_VAR = "SWITCHYARD_ENGINE_CPUS"
GPUS_VAR = "SWITCHYARD_ENGINE_GPUS"
TAGS = (NAMESPACE_VAR, TOKEN_VAR, INSTANCE_VAR, PORT_VAR, BACKEND_VAR, MEMORY_VAR, CPUS_VAR, GPUS_VAR)
_TAG_BYTES = tuple(tag.encode() for tag in TAGS)
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class EngineOwner:
    """The install an engine must belong to before we adopt, count or stop it."""

    namespace: str
    token: str

    def owns(self, tags: dict[str, str]) -> bool:
        return (tags.get(NAMESPACE_VAR) == self.namespace
                and hmac.compare_digest(tags.get(TOKEN_VAR, "").encode(), self.token.encode()))

    def environment(self) -> dict[str, str]:
        return {NAMESPACE_VAR: self.namespace, TOKEN_VAR: self.token}


PORT_TRIES = 256


def free_port(taken: Collection[int] = ()) -> int:
    """An unused TCP port of SWITCHYARD_ENGINE_PORTS, not in `taken`.

    The range lies below the kernel's ephemeral range, which `bind(0)` and every outgoing connection draw
    from: a port picked there could go to any connection on the host before the engine binds it (an engine
    that then cannot bind exits, and reconcile starts another). A foreign listener may still take a port of
    the range first (accepted: see sockets.py)."""
    low, high = settings.SWITCHYARD_ENGINE_PORTS
    for port in random.sample(range(low, high + 1), min(PORT_TRIES, high - low + 1)):
        if port in taken:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise OSError(f"no free TCP port in SWITCHYARD_ENGINE_PORTS ({low}-{high}) outside the engines' ports")


TAGS_VISIBLE_SECONDS = 5.0


def _wait_for_tags(pid: int) -> None:
    """Until the new process's environment shows its tags in /proc (or it is gone), at most a few seconds.

    Popen returns once the child's close-on-exec descriptors are closed, which the kernel does before it
    lays out the new program's environment: for a moment /proc/<pid>/environ is empty, and a scan then
    (`engine_ports()` for the next start under the host lock, the orphan sweep, adoption) would not see
    the engine. Seen in CI: an engine just started was missing from a scan right after its start."""
    deadline = time.monotonic() + TAGS_VISIBLE_SECONDS
    while INSTANCE_VAR not in environ_tags(pid):
        fields = stat_fields(pid)
        if fields is None or fields[0] == "Z" or time.monotonic() > deadline:  # gone: reconcile sees to it
            return
        time.sleep(0.001)


def engine_ports() -> set[int]:
    """Ports given to every live engine on the host, of any install — bound or still loading.

    A freshly spawned engine binds its port only after its interpreter starts, so the kernel may
    offer the same port to the next start; callers pick under capacity.host_lock() and skip these.
    """
    return {proc["port"] for _, proc in engine_processes() if proc["port"]}


def log_path(namespace: str, instance_id: int) -> Path:
    """One directory per install: two installs sharing a log dir both have an instance 1."""
    return Path(settings.SWITCHYARD_ENGINE_LOG_DIR) / namespace / f"instance-{instance_id}.log"


def spawn(argv: list[str], *, owner: EngineOwner, backend: str, instance_id: int, port: int, env: dict,
          cwd: str) -> dict:
    """Launch `argv` as a new session leader, output to the instance's log; return its handle."""
    path = log_path(owner.namespace, instance_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tags = {**owner.environment(), INSTANCE_VAR: str(instance_id), PORT_VAR: str(port), BACKEND_VAR: backend}
    with open(path, "ab") as log:
        proc = subprocess.Popen(argv, cwd=cwd, env={**os.environ, **env, **tags}, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    proc.returncode = 0  # we reap it ourselves (reap()); stops Popen.__del__ from warning
    _wait_for_tags(proc.pid)
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


def rss_bytes(pid: int) -> int:
    """Resident memory of `pid` (0 once it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE
    except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError, ValueError):
        return 0


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
    if not fields:
        return False
    return fields[0] != "Z" and int(fields[19]) == handle.get("start_time")


def environ_tags(pid: int) -> dict[str, str]:
    """The Switchyard tags in a process's environment ({} if it has none or is not readable)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return {}
    if INSTANCE_VAR.encode() not in raw:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs if k in _TAG_BYTES}


def engine_processes() -> list[tuple[dict, dict]]:
    """(tags, process) for every live engine process on this host, of any install."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        tags = environ_tags(int(entry.name))
        if INSTANCE_VAR not in tags:
            continue
        fields = stat_fields(int(entry.name))
        if fields and fields[0] != "Z":
            found.append((tags, {"pid": int(entry.name), "pgid": int(fields[2]), "start_time": int(fields[19]),
                                 "port": _int(tags.get(PORT_VAR)), "backend": tags.get(BACKEND_VAR, "")}))
    return found


def tagged_processes(owner: EngineOwner) -> dict[int, list[dict]]:
    """Instance id → its live processes (pid, pgid, start time, port), only those `owner` owns."""
    found: dict[int, list[dict]] = {}
    for tags, proc in engine_processes():
        if owner.owns(tags):
            found.setdefault(int(tags[INSTANCE_VAR]), []).append(proc)
    return found


def leader_handle(processes: list[dict]) -> dict | None:
    """The session leader among an instance's processes (the one we launched), if it is still there."""
    for proc in processes:
        if proc["pid"] == proc["pgid"]:
            return proc
    return None


def kill_instance(owner: EngineOwner, instance_id: int, grace: float) -> bool:
    """SIGTERM every process group of the instance, SIGKILL whatever is left after `grace`; True once none is left."""
    _signal_groups(owner, instance_id, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while tagged_processes(owner).get(instance_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    if tagged_processes(owner).get(instance_id):
        _signal_groups(owner, instance_id, signal.SIGKILL)
        return _wait_gone(owner, instance_id, 10.0)
    return True


def _signal_groups(owner: EngineOwner, instance_id: int, sig: int) -> None:
    # Only groups that hold a process tagged with this instance: a recycled pgid is never signalled.
    for proc in tagged_processes(owner).get(instance_id, []):
        try:
            os.killpg(proc["pgid"], sig)
        except (ProcessLookupError, PermissionError):
            pass
        reap(proc["pid"])


def _wait_gone(owner: EngineOwner, instance_id: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        procs = tagged_processes(owner).get(instance_id, [])
        for proc in procs:
            reap(proc["pid"])
        if not procs:
            return True
        time.sleep(0.1)
    return not tagged_processes(owner).get(instance_id)


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


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0
