"""Who listens on a TCP port: proof that an answer on a port comes from *our* process.

A free port is picked before an engine (or `make run`'s console) binds it, so another process —
another install's engine, another stack — may take it first and answer its /health. Only a
listening socket held by one of the expected processes counts. Linux /proc only; no Django here
(scripts/run.py uses it before anything is configured).
"""
import os
from pathlib import Path

LISTEN = "0A"


def listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on `port` (IPv4 and IPv6, any address)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def socket_inodes(pid: int) -> set[str]:
    """Inodes of the sockets `pid` holds open ({} when it is gone or not ours to read)."""
    found: set[str] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[8:-1])
    return found


def listened_by(port: int, pids) -> bool:
    """True when one of `pids` holds a socket listening on `port`."""
    wanted = listening_inodes(port)
    return bool(wanted) and any(wanted & socket_inodes(pid) for pid in pids)


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something already listens on `port` (a bind attempt, so it also sees other users' sockets)."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is no conflict
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return bool(listening_inodes(port))


def group_members(pgid: int) -> list[int]:
    """Pids of the live processes in process group `pgid` (a server and the workers it forked)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()  # state, ppid, pgrp, …
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members
