"""`make run`'s own Redis: the gateway keeps limits and budgets in Redis, and an embedded install has none.

With no REDIS_URL / SWITCHYARD_GATEWAY_REDIS_URL (nor their *_FILE) and `redis-server` installed,
`make run` starts a private one: loopback only, on a free port, with a password generated for this
run (in a 0600 config file under var/redis/, never on a command line), nothing persisted. Only the
gateway's URL is set (SWITCHYARD_GATEWAY_REDIS_URL, inherited by every child): the control plane keeps
its local-memory cache and filesystem broker, and publishes its changes to the gateway there. The
server is a child like the others, stopped last. Without `redis-server` nothing is started and the
gateway refuses inference with a 503 that says why (docs/gateway.md, "Redis").
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import time
from pathlib import Path

CONFIGURED = ("SWITCHYARD_GATEWAY_REDIS_URL", "REDIS_URL")


def configured() -> bool:
    """A Redis the operator chose (then `make run` starts none)."""
    return any(os.environ.get(name) or os.environ.get(f"{name}_FILE") for name in CONFIGURED)


def binary() -> str | None:
    return shutil.which("redis-server")


def write_config(folder: Path, port: int, password: str) -> Path:
    """redis.conf for a private server: loopback, a password, no persistence, no file outside `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    path = folder / "redis.conf"
    # set-proc-title no: Redis would otherwise write its title over its environment, where `make run`'s
    # stop checks look for the install's var/ (bench/_run_stack.py).
    text = (f"bind 127.0.0.1\nport {port}\nrequirepass {password}\nprotected-mode yes\n"
            f"save \"\"\nappendonly no\ndir {folder}\nset-proc-title no\n")
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as config:
        config.write(text)
    return path


def plan(folder: Path, port: int) -> tuple[list[str], str]:
    """(argv, URL) of a private server on `port`; the password is new every time."""
    server = binary()
    if server is None:
        raise FileNotFoundError("redis-server is not installed")
    password = secrets.token_urlsafe(24)
    return [server, str(write_config(folder, port, password))], f"redis://:{password}@127.0.0.1:{port}/0"


def answers(port: int, password: str) -> bool:
    """True once the server accepts the password and answers PING."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"AUTH %s\r\nPING\r\n" % password.encode())
            reply, deadline = b"", time.monotonic() + 1
            while b"PONG" not in reply and b"-" not in reply and time.monotonic() < deadline:
                reply += sock.recv(256) or b"-closed"
            return b"+OK\r\n+PONG\r\n" in reply
    except OSError:
        return False
