"""Closed-loop HTTP load: `wrk` when installed (Debian package), else an aiohttp generator process.

Both send the same POST body with the same headers from `concurrency` connections for `seconds`
and report requests/s, p50 and p99 latency and the count of failed requests. Choose with
BENCH_LOADGEN=wrk|python (default: wrk if on PATH). Compare only numbers from one generator.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from bench._procs import REPO_ROOT

WRK_SCRIPT = r"""
local f = assert(io.open(os.getenv("BENCH_BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
local auth = os.getenv("BENCH_AUTHORIZATION")
if auth and auth ~= "" then wrk.headers["Authorization"] = auth end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests": %d, "seconds": %f, "p50_ms": %f, "p99_ms": %f, "failed": %d}\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    e.connect + e.read + e.write + e.status + e.timeout))
end
"""


@dataclass(frozen=True)
class Result:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    failed: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def generator() -> str:
    chosen = os.environ.get("BENCH_LOADGEN") or ("wrk" if shutil.which("wrk") else "python")
    if chosen not in ("wrk", "python"):
        raise SystemExit(f"BENCH_LOADGEN must be wrk or python, not {chosen!r}")
    return chosen


def run(url: str, body: dict, *, concurrency: int, seconds: float, authorization: str = "") -> Result:
    """One measurement cell."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as body_file:
        json.dump(body, body_file)
        body_file.flush()
        if generator() == "wrk":
            return _wrk(url, body_file.name, concurrency, seconds, authorization)
        return _python(url, body_file.name, concurrency, seconds, authorization)


def _wrk(url: str, body_file: str, concurrency: int, seconds: float, authorization: str) -> Result:
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write(WRK_SCRIPT)
        script.flush()
        env = {**os.environ, "BENCH_BODY_FILE": body_file, "BENCH_AUTHORIZATION": authorization}
        command = ["wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "--timeout", "10s",
                   "-s", script.name, url]
        return _parse(subprocess.run(command, env=env, capture_output=True, text=True, timeout=seconds + 60))


def _python(url: str, body_file: str, concurrency: int, seconds: float, authorization: str) -> Result:
    command = [sys.executable, "-m", "bench._loadgen", url, body_file, str(concurrency), str(seconds)]
    env = {**os.environ, "BENCH_AUTHORIZATION": authorization}
    return _parse(subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                                 timeout=seconds + 60))


def _parse(done: subprocess.CompletedProcess) -> Result:
    for line in done.stdout.splitlines():
        if line.startswith("BENCHJSON "):
            return Result(**json.loads(line.removeprefix("BENCHJSON ")))
    raise RuntimeError(f"load generator failed ({done.returncode}): {done.stdout[-1000:]}{done.stderr[-1000:]}")
