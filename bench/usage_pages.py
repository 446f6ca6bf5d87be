"""Every usage page and API on 10 M raw events and a year of rollups in PostgreSQL: p50 / p95 vs a 300 ms target.

    .venv/bin/python -m bench usage_pages

Self-contained: uses its own database (`BENCH_USAGE_DB`, default `switchyard_bench_usage`) on the
PostgreSQL server of `DATABASE_URL` (default postgres://postgres@127.0.0.1:5432), creates and
migrates it, seeds `BENCH_USAGE_EVENTS` (default 10,000,000) events over 365 days with their hourly
and daily usage and cost rollups once, and reuses them on later runs (new hours since are topped up).
The measurement runs in a child process (`bench/_usage_run.py`) with that database, so nothing in
this process — or the other benchmarks `python -m bench` runs — is configured for it.
"""
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

DEFAULT_SERVER = "postgres://postgres@127.0.0.1:5432/postgres"
ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    name = os.environ.get("BENCH_USAGE_DB", "switchyard_bench_usage")
    server = _server_url()
    problem = _ensure_database(server, name)
    if problem:
        print(f"usage_pages: skipped ({problem})")
        return
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}  # locmem cache, no broker
    env.update(DATABASE_URL=_with_database(server, name), DJANGO_SETTINGS_MODULE="controlplane.settings",
               LOG_LEVEL=os.environ.get("LOG_LEVEL", "WARNING"))
    result = subprocess.run([sys.executable, "-m", "bench._usage_run"], cwd=ROOT, env=env, check=False)
    if result.returncode:
        raise SystemExit(f"usage_pages: the measurement process failed (exit {result.returncode})")


def _server_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        url = DEFAULT_SERVER
    return _with_database(url, "postgres")


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))


def _ensure_database(server: str, name: str) -> str | None:
    """Create the benchmark database when missing; the reason it cannot be used, or None."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed"
    try:
        with psycopg.connect(server, connect_timeout=3, autocommit=True) as connection:
            exists = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            if not exists:
                connection.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        return f"PostgreSQL at {urlsplit(server).netloc} is not usable: {str(exc).strip().splitlines()[0]}"
    return None


if __name__ == "__main__":
    main()
