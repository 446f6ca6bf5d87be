"""Rollouts under load: a gated canary against an un-gated hard switch, per kind of new version.

    .venv/bin/python -m bench rollout        # BENCH_ROLLOUT_RATE (10 req/s), BENCH_ROLLOUT_SCENARIOS (all)

Real processes: `python -m simulator` engines (one of version A; one per scenario's version B:
healthy, failing 20 % of its requests (`--error-rate 0.2`), three times slower (`--latency-multiplier 3`),
hanging after the first byte on 20 % of its requests (`--hang-after-first-byte 0.2`)),
the real gateway, and a driver (`bench/_rollout_drive.py`) on the same throwaway database that starts
each rollout through `rollouts.services` and steps it with `rollouts.stepping.step` — what the beat task
does every 5 s, here every second. Bake times are compressed: stages 10 % for 10 s → 50 % for 10 s →
100 % for 5 s, `min_requests` 20, gate window 30 s; the gateway's idle timeout, which ends a hung request, is
5 s (default 30 s). Then the same load against a hard switch to the same
version for as long as the gated run took (the deployment's version changed at once, nothing watching).

Reported per run: the weight of B over time (seconds since the first stage → weight), requests sent,
failed at the client, served by A and by B (the gateway's usage records), B's engine errors (including
those retried on A before the first byte), time to detect (first stage live → the rollback decision) and
time to roll back (the decision → the end of the last request B served), and the p95 time to first token
of every answered request of the run (the gateway's records, both versions).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from bench._fleet import Fleet, redis_problem, redis_url
from bench._procs import REPO_ROOT, Processes

ENGINE = ("--decode-ms-per-token", "1", "--prefill-ms-per-token", "3", "--max-num-seqs", "64")
SCENARIOS = {"healthy": (), "error-prone": ("--error-rate", "0.2", "--seed", "5"),
             "slow": ("--latency-multiplier", "3",), "hanging": ("--hang-after-first-byte", "0.2", "--seed", "5")}
IDLE_TIMEOUT = "5"  # seconds (SWITCHYARD_GATEWAY_IDLE_TIMEOUT, default 30): how long a hung request holds its client


def chosen_scenarios() -> dict:
    """BENCH_ROLLOUT_SCENARIOS (comma-separated names; default: all) — one alone for a short run."""
    names = [n.strip() for n in os.environ.get("BENCH_ROLLOUT_SCENARIOS", "").split(",") if n.strip()]
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"BENCH_ROLLOUT_SCENARIOS: unknown {unknown}; known: {', '.join(SCENARIOS)}")
    return {name: SCENARIOS[name] for name in names} if names else SCENARIOS


def main() -> None:
    problem = redis_problem(redis_url())
    if problem:
        print(f"rollout: Redis at {redis_url()} is unavailable ({problem}); the gateway needs it (skipped)")
        return
    rate = float(os.environ.get("BENCH_ROLLOUT_RATE", "10"))
    scenarios = chosen_scenarios()
    with Processes() as procs:
        fleet = Fleet(procs)
        try:
            fleet.start_simulator(*ENGINE)
            fleet.create_rows()  # version A's deployment, its engine (one, as B has), a key
            b_urls = {name: fleet.start_simulator(*ENGINE, *extra) for name, extra in scenarios.items()}
            fleet.start_gateway(env={"SWITCHYARD_GATEWAY_IDLE_TIMEOUT": IDLE_TIMEOUT})
            command = [sys.executable, "-m", "bench._rollout_drive", "--gateway", fleet.gateway_url,
                       "--key", fleet.key, "--model", fleet.model, "--rate", str(rate),
                       *(arg for name, url in b_urls.items() for arg in ("--scenario", f"{name}={url}"))]
            done = subprocess.run(command, cwd=REPO_ROOT, env=fleet.env(), capture_output=True, text=True,
                                  timeout=1800)
            if done.returncode != 0:
                raise RuntimeError(f"rollout driver failed:\n{done.stderr[-4000:]}")
            runs = json.loads(done.stdout.strip().splitlines()[-1])
        finally:
            fleet.cleanup()
    _print(rate, runs)


def _seconds(value) -> str:
    return "—" if value is None else f"{value:.1f} s"


def _ms(value) -> str:
    return "—" if value is None else f"{value:.0f} ms"


def _timeline(points) -> str:
    return " → ".join(f"{t:g}s:{w:.0%}" for t, w in points)


def _print(rate: float, runs: list[dict]) -> None:
    print(f"{rate:g} req/s open loop, 4 completion tokens each; canary stages 10 % (10 s) → 50 % (10 s) → 100 % (5 s), "
          f"min_requests 20, window 30 s, stepped every 1 s, gateway idle timeout {IDLE_TIMEOUT} s "
          "(compressed; defaults 15 min / 15 min / 5 min, step 5 s, idle 30 s)\n")
    print("| scenario | run | outcome | weight of B over time | sent | failed | served by A | served by B "
          "| B engine errors | p95 TTFT | time to detect | time to roll back |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for run in runs:
        print(f"| {run['scenario']} | {run['mode']} | {run['outcome']} | {_timeline(run['timeline'])} | {run['sent']} "
              f"| {run['failed']} | {run['served_a']} | {run['served_b']} | {run['b_engine_errors']} "
              f"| {_ms(run['ttft_p95_ms'])} "
              f"| {_seconds(run['detect_s'])} | {_seconds(run['rollback_s'])} |")
    print()
    for run in runs:
        if run["reason"] or run["failures"]:
            print(f"- {run['scenario']}, {run['mode']}: {run['reason'] or run['outcome']}"
                  f"{'; failed with ' + str(run['failures']) if run['failures'] else ''}")
