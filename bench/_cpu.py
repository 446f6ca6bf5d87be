"""CPU time per request of the processes behind one benchmark cell, from /proc (Linux only).

Every process of a cell shares the machine's cores, so requests/s at full load is about
cores ÷ (the CPU every process spends per request). Measuring that sum per process says where
a cell's time goes, and what a faster or slower machine would change, better than req/s alone.

    meter = CpuMeter({"gateway": [gateway_pid], "engine": [engine_pid]}, redis_url)
    meter.start(); ...load...; per_request = meter.stop(requests)   # {"gateway": µs, ...}

Process groups are whole process trees (a `--workers` gateway's workers count with it). Redis
counts when its server runs on this machine (`INFO server`'s process_id is visible in /proc);
the load generator is whatever child the benchmark ran and reaped in between (RUSAGE_CHILDREN).
"""
from __future__ import annotations

import os
import resource

from fleet.runtime.processes import stat_fields

LOAD_GENERATOR = "load generator"
REDIS = "Redis"
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def available() -> bool:
    return os.path.exists("/proc/self/stat")


class CpuMeter:
    def __init__(self, groups: dict[str, list[int]], redis_url: str | None = None):
        self._groups = {label: list(pids) for label, pids in groups.items()}
        redis_pid = _local_redis_pid(redis_url) if redis_url else None
        if redis_pid is not None:
            self._groups[REDIS] = [redis_pid]
        self._before: dict[int, float] = {}
        self._trees: dict[str, set[int]] = {}
        self._children_before = 0.0
        self.busy: dict[str, int] = {}  # after `stop`: per group, the processes that did a share of its work

    def start(self) -> None:
        parents = _parents()
        self._trees = {label: _tree(pids, parents) for label, pids in self._groups.items()}
        self._before = {pid: _cpu_seconds(pid) for tree in self._trees.values() for pid in tree}
        self._children_before = _children_seconds()

    def stop(self, requests: int) -> dict[str, float]:
        """µs of CPU per request for each group and the load generator (empty without requests).

        Also sets `busy`: how many processes of each group used at least a tenth of its CPU (a
        `--workers 2` gateway: its two workers, not the supervisor) — one core is each one's limit."""
        spent = {}
        for label, tree in self._trees.items():
            # A process gone before the end counts nothing (its last reading is lost with it).
            each = [max(0.0, _cpu_seconds(pid) - self._before[pid]) for pid in tree]
            spent[label] = sum(each)
            self.busy[label] = max(1, sum(1 for seconds in each if seconds >= 0.1 * spent[label] > 0))
        spent[LOAD_GENERATOR] = _children_seconds() - self._children_before
        if requests <= 0:
            return {}
        return {label: seconds * 1e6 / requests for label, seconds in spent.items()}

    def ceiling(self, per_request: dict[str, float], cores: int) -> float:
        """The req/s these costs allow: every core busy (cores ÷ the total), unless one group's
        processes are the limit first (each of them at most one core)."""
        limits = [cores * 1e6 / sum(per_request.values())]
        limits += [self.busy[label] * 1e6 / cost for label, cost in per_request.items()
                   if label in self.busy and cost > 0]
        return min(limits)


def _children_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process visible now."""
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = stat_fields(int(name))
            if fields:
                parents[int(name)] = int(fields[1])
    return parents


def _tree(roots: list[int], parents: dict[int, int]) -> set[int]:
    tree, grown = set(roots), True
    while grown:
        children = {pid for pid, parent in parents.items() if parent in tree and pid not in tree}
        tree |= children
        grown = bool(children)
    return tree


def _cpu_seconds(pid: int) -> float:
    """User + system time of this process (all its threads) so far; 0 once it is gone."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / _TICKS if fields else 0.0  # utime, stime (stat's 14th, 15th)


def _local_redis_pid(url: str) -> int | None:
    """The Redis server's pid when it runs on this machine, else None."""
    import redis

    try:
        pid = int(redis.Redis.from_url(url, socket_timeout=2).info("server")["process_id"])
    except (redis.RedisError, KeyError, ValueError):
        return None
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return pid if "redis" in comm.read() else None
    except OSError:
        return None
