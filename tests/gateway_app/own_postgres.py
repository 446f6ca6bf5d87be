"""A PostgreSQL server of the test's own, to stop and start again: the shared one is never touched.

`initdb` + `pg_ctl` from the Debian packages (/usr/lib/postgresql/<version>/bin), run as the
`postgres` user (through `runuser` when the tests run as root), in a throwaway directory, on a free
loopback port, with fsync off (nothing here must survive a power cut). `problem()` says why it
cannot run here, for a clean skip.
"""
from __future__ import annotations

import getpass
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench._procs import free_port


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def problem() -> str | None:
    """None when a private cluster can be started here, else why not."""
    if _bin_dir() is None:
        return "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user"
    if getpass.getuser() not in ("root", "postgres"):
        return "initdb must run as the postgres user (tests run as neither root nor postgres)"
    if getpass.getuser() == "root" and shutil.which("runuser") is None:
        return "no runuser to run initdb as postgres"
    return None


class OwnPostgres:
    """One private cluster: `start()` / `stop()` as often as a test needs; `destroy()` at the end."""

    def __init__(self):
        self.bin = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="switchyard-own-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        user = pwd.getpwnam("postgres")
        os.chown(self.root, user.pw_uid, user.pw_gid)
        self._as_postgres([str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                           "-E", "UTF8", "--no-sync"])
        self.start()
        self._as_postgres([str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                           "switchyard"])

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/switchyard"

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off"
        self._as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                           str(self.root / "server.log"), "-w", "start"])

    def stop(self) -> None:
        """A fast shutdown: sessions are terminated at once (what clients see when a database goes away)."""
        self._as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
                              check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def query(self, sql: str, *params) -> list[tuple]:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="switchyard",
                             connect_timeout=5) as connection:
            return connection.execute(sql, params).fetchall()

    @staticmethod
    def _as_postgres(argv: list[str], check: bool = True) -> None:
        if getpass.getuser() == "root":
            argv = ["runuser", "-u", "postgres", "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd="/tmp")
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
