"""Host capacity for process engines: admit an engine only when this machine has room for it.

An engine states what it needs (memory, CPU cores, GPUs) when it is started, in its environment,
so every install on the host sees what every other one has admitted. Free memory is the smaller
of two views, both after the reserve kept for the OS and Switchyard itself:
  - accounting: host memory − what each running engine holds (its admitted size, or its resident
    memory if that grew beyond it);
  - measurement: memory the kernel says is available now − what the engines still starting are
    yet to allocate (an engine loading weights has not reached its size).
Decisions and launches happen under one host-wide file lock, so two workers (or two installs)
never both take the last slot.
"""
import fcntl
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from fleet.runtime import processes
from fleet.runtime.processes import CPUS_VAR, GPUS_VAR, INSTANCE_VAR, MEMORY_VAR, NAMESPACE_VAR

MIB = 1024 * 1024
GIB = 1024 * MIB
UNLIMITED = 1 << 60
WAITING_FOR_CAPACITY = "waiting for host capacity"


@dataclass(frozen=True)
class Need:
    """What one engine is admitted with."""

    memory_bytes: int
    cpus: float = 0.0
    gpus: int = 0

    def environment(self) -> dict[str, str]:
        return {MEMORY_VAR: str(self.memory_bytes), CPUS_VAR: repr(self.cpus), GPUS_VAR: str(self.gpus)}


@dataclass(frozen=True)
class EngineUse:
    """One running engine (all its processes) as admission sees it."""

    admitted: Need
    resident_bytes: int

    @property
    def holds_bytes(self) -> int:
        return max(self.admitted.memory_bytes, self.resident_bytes)

    @property
    def still_to_allocate(self) -> int:
        return max(0, self.admitted.memory_bytes - self.resident_bytes)


@dataclass(frozen=True)
class Host:
    """This machine's resources for engines, and what the engines already hold."""

    memory_total: int
    memory_available: int
    cpus_total: float
    gpus_total: int
    engines: tuple[EngineUse, ...]

    @property
    def free_memory(self) -> int:
        reserve = settings.SWITCHYARD_HOST_RESERVED_MEMORY_MB * MIB
        by_accounting = self.memory_total - reserve - sum(e.holds_bytes for e in self.engines)
        by_measurement = self.memory_available - reserve - sum(e.still_to_allocate for e in self.engines)
        return max(0, min(by_accounting, by_measurement))

    @property
    def free_cpus(self) -> float:
        held = sum(e.admitted.cpus for e in self.engines)
        return max(0.0, self.cpus_total - settings.SWITCHYARD_HOST_RESERVED_CPUS - held)

    @property
    def free_gpus(self) -> int:
        return max(0, self.gpus_total - sum(e.admitted.gpus for e in self.engines))


def shortfall(need: Need, host: Host | None = None) -> str | None:
    """Why `need` does not fit on this host right now, or None when it does."""
    host = host or observe()
    problems = []
    if need.memory_bytes > host.free_memory:
        problems.append(f"needs {_gib(need.memory_bytes)} memory, {_gib(host.free_memory)} free")
    if need.cpus > host.free_cpus + 1e-9:
        problems.append(f"needs {need.cpus:g} CPU core{'s' if need.cpus != 1 else ''}, "
                        f"{host.free_cpus:g} of {host.cpus_total:g} free")
    if need.gpus > host.free_gpus:
        problems.append(f"needs {need.gpus} GPU{'s' if need.gpus != 1 else ''}, {host.free_gpus} free")
    return f"{WAITING_FOR_CAPACITY}: " + "; ".join(problems) if problems else None


def observe() -> Host:
    """Read this machine's memory, cores and GPUs, and every tagged engine on it (any install)."""
    total, available = _memory()
    return Host(memory_total=total, memory_available=available, cpus_total=_cpus(), gpus_total=_gpus(),
                engines=tuple(engine_uses()))


def engine_uses() -> list[EngineUse]:
    """Every engine on the host, by (namespace, instance), with its admitted need and resident memory."""
    grouped: dict[tuple[str, str], list[tuple[dict, dict]]] = {}
    for tags, proc in processes.engine_processes():
        grouped.setdefault((tags.get(NAMESPACE_VAR, ""), tags[INSTANCE_VAR]), []).append((tags, proc))
    return [EngineUse(admitted=_admitted(members[0][0]), resident_bytes=sum(processes.rss_bytes(p["pid"])
                                                                           for _, p in members))
            for members in grouped.values()]


@contextmanager
def host_lock():
    """One admission at a time on this host, across workers and installs (held until the engine is tagged)."""
    path = Path(settings.SWITCHYARD_HOST_LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _admitted(tags: dict) -> Need:
    # An engine started before admission existed carries no figures: it holds what it is using.
    try:
        return Need(memory_bytes=int(tags.get(MEMORY_VAR) or 0), cpus=float(tags.get(CPUS_VAR) or 0),
                    gpus=int(tags.get(GPUS_VAR) or 0))
    except ValueError:
        return Need(memory_bytes=0)


def _memory() -> tuple[int, int]:
    info = _meminfo()
    total, available = info.get("MemTotal", 0), info.get("MemAvailable", 0)
    limit = _cgroup_memory_limit()
    if limit is not None and limit < total:
        available = min(available, limit - _cgroup_memory_usage())
        total = limit
    override = settings.SWITCHYARD_HOST_MEMORY_MB
    return (min(total, override * MIB) if override else total), available


def _meminfo() -> dict[str, int]:
    values = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[name] = int(parts[0]) * 1024
    return values


def _cgroup_files(v2_name: str, v1_name: str) -> list[Path]:
    """Our cgroup's memory file, v2 then v1 (a container sees its own cgroup at the root)."""
    candidates = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidates.append(Path("/sys/fs/cgroup") / path.lstrip("/") / v2_name)
        elif "memory" in controllers.split(","):
            candidates.append(Path("/sys/fs/cgroup/memory") / path.lstrip("/") / v1_name)
    return candidates + [Path("/sys/fs/cgroup") / v2_name, Path("/sys/fs/cgroup/memory") / v1_name]


def _read_cgroup(v2_name: str, v1_name: str) -> int | None:
    for path in _cgroup_files(v2_name, v1_name):
        try:
            raw = path.read_text().strip()
        except OSError:
            continue
        return UNLIMITED if raw == "max" else int(raw)
    return None


def _cgroup_memory_limit() -> int | None:
    limit = _read_cgroup("memory.max", "memory.limit_in_bytes")
    return None if limit is None or limit >= UNLIMITED else limit


def _cgroup_memory_usage() -> int:
    return _read_cgroup("memory.current", "memory.usage_in_bytes") or 0


def _cpus() -> float:
    return float(settings.SWITCHYARD_HOST_CPUS or len(os.sched_getaffinity(0)))


def _gpus() -> int:
    if settings.SWITCHYARD_HOST_GPUS >= 0:
        return settings.SWITCHYARD_HOST_GPUS
    return sum(1 for entry in Path("/dev").glob("nvidia*") if re.fullmatch(r"nvidia\d+", entry.name))


def _gib(value: int) -> str:
    return f"{value / GIB:.1f} GiB"
