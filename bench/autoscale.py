"""Autoscaling on the stand-up spike: fixed fleets at min and max size against the autoscaler, side by side.

    .venv/bin/python -m bench autoscale   # BENCH_AUTOSCALE_QUIET_RATE / _SPIKE_RATE / _SEED / _MAX / _LOAD_SECONDS

One throwaway install (SQLite var dir, the embedded filesystem broker) with five deployments of the
same simulated model, made by the fleet's services: a fixed fleet at min size, a fixed fleet at
max size, and three autoscaled deployments (min → max): one plain, one with a warm pool, and one with
a schedule window over the spike (max size from the step to the end of the hold, opened early by the
modeled cold start and a margin), set just before the replay starts, as an operator would for a stand-up.
A real Celery worker with embedded beat runs the fleet as in production — reconcile starts simulator engines through
the simulator runtime backend, the health pass scrapes their metrics, `fleet.autoscale` applies the
policy (both every second here, every 5 s in production: `bench/_worker_proc.py`) — and one real
gateway process routes to them. The stand-up spike
(`bench/workload.py`) is replayed open loop to all five deployments at once, so they share the
machine's load. Engines model prefill, decode and a cold start (`--load-seconds`).

Reported per deployment: TTFT p95 over the run and during the spike (client-measured, first
streamed token), the time from the load step until the p95 of every later 5-s window of the spike
(by send time; a failed request counts as over) is back under the SLO, instance-seconds (each engine from
its launch to its stop, warm ones included), scale decisions, and for promotions the time from
the decision to the first token the promoted instance served (from the gateway's usage records).
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from bench import workload
from bench._fleet import redis_problem, redis_url
from bench._procs import REPO_ROOT, Processes, free_port, stderr_tail, wait_http

MAX = int(os.environ.get("BENCH_AUTOSCALE_MAX", "5"))
MIN = int(os.environ.get("BENCH_AUTOSCALE_MIN", "1"))  # the fixed min fleet's size and the autoscaled minimum
SCHEDULE_SERVING = int(os.environ.get("BENCH_AUTOSCALE_SCHEDULE_SERVING", str(MAX)))  # the window's min_serving
LOAD_SECONDS = float(os.environ.get("BENCH_AUTOSCALE_LOAD_SECONDS", "20"))  # modeled cold start (vLLM: minutes)
SLO_MS = 500.0
WINDOW_SECONDS = 5.0  # the windows "back under the SLO" is judged on
SIMULATOR = {"max_num_seqs": 4, "prefill_ms_per_token": 0.15, "decode_ms_per_token": 30.0,
             "max_model_len": 4096, "num_gpu_blocks": 1024, "load_seconds": LOAD_SECONDS}
# Time runs ~20× faster than in production: windows and cooldowns (docs/autoscaling.md's defaults ÷ 20; the up
# window ÷ 7, so that it still spans 3 samples), the cold start (minutes for real vLLM), the spike. The health
# and autoscale passes run every second instead of every 5 s (5×, not 20×: two cores could not take more).
PASS_SECONDS = 1.0
# The queue threshold is 2 waiting per instance: these engines run 4 sequences at once (vLLM's default is 256), so a
# queue of 2 is already half an engine's batch over its capacity (docs/benchmarks.md).
POLICY = {"queue_per_instance": 2.0, "ttft_p95_slo_ms": SLO_MS, "up_window_seconds": 3, "cooldown_up_seconds": 3,
          "low_water_per_instance": 1.5, "idle_window_seconds": 15, "cooldown_down_seconds": 15, "max_step": 2}
PRODUCTION = {"up_window_seconds": 20, "cooldown_up_seconds": 60, "idle_window_seconds": 300,
              "cooldown_down_seconds": 300}
SCHEDULE_MARGIN_SECONDS = 20.0  # setting the window (a Django child process) must be done before the replay
# The scheduled deployment's lead: the modeled cold start plus a margin for the engine process's own start and one
# autoscale pass (docs/autoscaling.md, "Sizing it"); until 2026-12-06 it was the cold start alone, and the new
# engines were at best just ready at the step.
SCHEDULE_LEAD_SECONDS = LOAD_SECONDS + 10.0
TARGET_TTFT_RATIO = 1.25
TARGET_INSTANCE_SHARE = 0.60
TARGET_PROMOTION_SECONDS = 5.0


def scenarios() -> list[dict]:
    return [
        {"name": "fixed-min", "label": f"fixed fleet, min size ({MIN})", "model": "coder-min", "min": MIN, "max": MIN},
        {"name": "fixed-max", "label": f"fixed fleet, max size ({MAX})", "model": "coder-max", "min": MAX, "max": MAX},
        {"name": "auto", "label": f"autoscaled {MIN}–{MAX}", "model": "coder-auto", "min": MIN, "max": MAX,
         "policy": POLICY},
        {"name": "auto-warm", "label": f"autoscaled {MIN}–{MAX}, warm pool 1", "model": "coder-warm", "min": MIN,
         "max": MAX, "warm": 1, "policy": POLICY},
        {"name": "auto-sched", "label": f"autoscaled {MIN}–{MAX} + schedule", "model": "coder-sched", "min": MIN,
         "max": MAX, "policy": {**POLICY, "schedule_lead_seconds": int(SCHEDULE_LEAD_SECONDS)}},
    ]


def schedule_window(spec, start_at: float) -> dict:
    """The operator's window for the stand-up: max size from the step to the end of the held spike (the fade is
    left to the reactive rules), in UTC to the second (one weekday: an end past midnight is an overnight window)."""
    from datetime import datetime, timezone

    opens = datetime.fromtimestamp(start_at + spec.step_at, timezone.utc)
    closes = datetime.fromtimestamp(start_at + spec.step_at + spec.hold_seconds, timezone.utc)
    return {"days": opens.strftime("%a").lower(), "start": opens.strftime("%H:%M:%S"),
            "end": closes.strftime("%H:%M:%S"), "time_zone": "UTC", "min_serving": SCHEDULE_SERVING}


@dataclass
class Outcome:
    sent_at: float  # seconds from the start of the replay
    ttft: float | None  # seconds; None: failed


@dataclass
class Result:
    scenario: dict
    outcomes: list[Outcome]
    rows: dict = field(default_factory=dict)

    def ttfts_ms(self, begin: float = 0.0, end: float = float("inf")) -> list[float]:
        return [o.ttft * 1000 for o in self.outcomes if o.ttft is not None and begin <= o.sent_at < end]

    def failed(self) -> int:
        return sum(1 for o in self.outcomes if o.ttft is None)


def main() -> None:
    problem = redis_problem(redis_url())
    if problem:
        print(f"autoscale: Redis at {redis_url()} is unavailable ({problem}); the gateway needs it (skipped)")
        return
    spec = workload.StandupSpec.from_env()
    var_dir = tempfile.mkdtemp(prefix="switchyard-bench-autoscale-")
    env = _env(var_dir)
    try:
        with Processes() as procs:
            try:
                results, began = _run(procs, env, spec, var_dir)
            finally:
                _stop_fleet(procs, env)
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    _print(spec, results, began)


def _run(procs: Processes, env: dict, spec, var_dir: str) -> tuple[list[Result], float]:
    key = _rows(env, "setup", json.dumps({"scenarios": scenarios(), "simulator_params": SIMULATOR}))["key"]
    procs.worker = procs.python("-m", "bench._worker_proc", "--pass-seconds", str(PASS_SECONDS), "--concurrency", "3",
                                "--schedule", os.path.join(var_dir, "beat-schedule"), "-l", "WARNING", env=env)
    gateway_url = _start_gateway(procs, env, key)
    _wait_for_fleet(env, procs.worker)
    began = _schedule_then_wait(env, spec)
    outcomes = asyncio.run(_replay_all(gateway_url, key, spec))
    ended = time.time()
    rows = _rows(env, "report", str(began), str(ended))
    if os.environ.get("BENCH_AUTOSCALE_OUTCOMES"):  # every request's (send time, TTFT) and usage record
        with open(os.environ["BENCH_AUTOSCALE_OUTCOMES"], "w") as out:
            json.dump({"began": began, "sent": {model: [[o.sent_at, o.ttft] for o in found]
                                                for model, found in outcomes.items()},
                       "usage": {name: found.pop("usage", []) for name, found in rows.items()}}, out)
    results = [Result(s, outcomes[s["model"]], rows.get(s["name"], {})) for s in scenarios()]
    return results, began


def _schedule_then_wait(env: dict, spec) -> float:
    """Set the scheduled deployment's window for a replay starting SCHEDULE_MARGIN s from now; wait until then."""
    # On a whole second: the window's times are written to the second.
    start_at = float(math.ceil(time.time() + SCHEDULE_MARGIN_SECONDS))
    _rows(env, "schedule", "auto-sched", json.dumps([schedule_window(spec, start_at)]))
    late = time.time() - start_at
    if late > 0:
        raise RuntimeError(f"setting the schedule took {late:.1f} s past the planned start; raise the margin")
    time.sleep(max(0.0, start_at - time.time()))
    return time.time()


def _env(var_dir: str) -> dict:
    """The children's environment: this var dir's SQLite and broker, the bench Redis database, an engine namespace."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "SWITCHYARD_CELERY_QUEUE")}
    env.update(SWITCHYARD_VAR_DIR=var_dir, SWITCHYARD_GATEWAY_REDIS_URL=redis_url(),
               SWITCHYARD_FLEET_NAMESPACE=f"bench-autoscale-{os.getpid()}",
               SWITCHYARD_ENGINE_LOG_DIR=os.path.join(var_dir, "engines"),
               DJANGO_SETTINGS_MODULE="controlplane.settings", LOG_LEVEL="WARNING", PYTHONPATH=str(REPO_ROOT))
    return env


def _rows(env: dict, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "bench._autoscale_rows", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"bench._autoscale_rows {args[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _start_gateway(procs: Processes, env: dict, key: str) -> str:
    port = free_port()
    proc = procs.python("-m", "gateway", "--port", str(port), "--workers", "1", env=env)
    url = f"http://127.0.0.1:{port}"
    models = {s["model"].encode() for s in scenarios()}
    try:
        # The models are listed once an engine of each is ready: the fleet's first cold starts (20 s modeled, far
        # more on a loaded machine) come first.
        wait_http(f"{url}/v1/models", proc=proc, timeout=240, headers={"authorization": f"Bearer {key}"},
                  accept=lambda status, body: status == 200 and all(m in body for m in models))
    except RuntimeError as error:
        raise RuntimeError(f"{error}\n{stderr_tail(proc)}") from None
    return url


def _wait_for_fleet(env: dict, worker, timeout: float = 240.0) -> None:
    """Until every deployment has its serving and warm targets ready (the cold starts of the initial fleet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"the Celery worker exited with {worker.returncode}\n{stderr_tail(worker)}")
        found = _rows(env, "status")
        if found and all(d["serving"] == d["serving_target"] and d["warm"] == d["warm_target"] for d in found.values()):
            time.sleep(WINDOW_SECONDS)  # a few quiet samples before the load starts
            return
        time.sleep(2)
    raise RuntimeError(f"the fleet did not come up within {timeout:.0f} s: {found}\n{stderr_tail(worker)}")


def _stop_fleet(procs: Processes, env: dict) -> None:
    """The worker first (it would restart engines), then every engine of the bench's namespace."""
    worker = getattr(procs, "worker", None)
    if worker is not None:
        procs.stop(worker)
    _rows(env, "cleanup")


async def _replay_all(gateway_url: str, key: str, spec) -> dict[str, list[Outcome]]:
    import aiohttp

    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=300)) as session:
        started = asyncio.get_running_loop().time()
        runs = [_replay(session, gateway_url, headers, workload.generate_standup(spec, s["model"]), started)
                for s in scenarios()]
        done = await asyncio.gather(*runs)
    return {s["model"]: outcomes for s, outcomes in zip(scenarios(), done)}


async def _replay(session, gateway_url: str, headers: dict, items, started: float) -> list[Outcome]:
    """Send every item at its time (open loop), whatever the earlier ones are doing."""
    loop = asyncio.get_running_loop()
    tasks = []
    for item in items:
        delay = started + item.at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_stream(session, gateway_url + item.endpoint, headers, item.body)))
    ttfts = await asyncio.gather(*tasks)
    return [Outcome(item.at, ttft) for item, ttft in zip(items, ttfts)]


async def _stream(session, url: str, headers: dict, body: dict) -> float | None:
    """Seconds to the first streamed token, or None if the request failed."""
    began = time.perf_counter()
    first = None
    try:
        async with session.post(url, json=body, headers=headers) as response:
            if response.status != 200:
                await response.read()
                return None
            async for line in response.content:
                if first is None and _has_token(line):
                    first = time.perf_counter() - began
    except Exception:  # noqa: BLE001 - a failed request is counted, not fatal
        return None
    return first


def _has_token(line: bytes) -> bool:
    if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
        return False
    choice = (json.loads(line[6:]).get("choices") or [{}])[0]
    return bool(choice.get("text") or (choice.get("delta") or {}).get("content"))


def p95_rank(count: int) -> int:
    """The index, in ascending order, of the value `p95` reports out of `count` (count ≥ 1)."""
    return min(count - 1, int(0.95 * count))


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[p95_rank(len(ordered))] if ordered else float("nan")


def back_under_slo(result: Result, spec) -> float | None:
    """Seconds from the step to the end of the last window of the spike (by send time) whose p95 TTFT was over
    the SLO or had a failure; 0 if none was; None if the spike ended over it. The quiet phases are left out:
    at one request a second a 5-s window's p95 is its slowest request."""
    last_over = None
    at = spec.step_at
    while at < spec.spike_ends:
        window = [o for o in result.outcomes if at <= o.sent_at < at + WINDOW_SECONDS]
        over = any(o.ttft is None for o in window) or (window and p95([o.ttft * 1000 for o in window]) > SLO_MS)
        if over:
            last_over = at + WINDOW_SECONDS
        at += WINDOW_SECONDS
    if last_over is None:
        return 0.0
    return None if last_over >= spec.spike_ends else last_over - spec.step_at


def promotion_seconds(result: Result, *, warm: bool = True, served: bool = True) -> list[float]:
    """For each promotion of a ready warm instance (or, `warm=False`, of one still cold-starting, which the
    pool had not refilled yet): seconds from the decision that caused it to the instance's first token
    (`served=False`: to the promotion itself, the routing change)."""
    decisions = [d for d in result.rows.get("decisions", []) if d["to"] > d["from"]]
    found = []
    for promotion in result.rows.get("promotions", []):
        cause = [d for d in decisions if d["at"] <= promotion["at"] + 0.5]
        end = promotion["first_served"] if served else promotion["at"]
        if cause and end is not None and promotion["was_ready"] == warm:
            found.append(end - cause[-1]["at"])
    return found


def _print(spec, results: list[Result], began: float) -> None:
    print(f"autoscaling on the stand-up spike (seed {spec.seed}): {spec.quiet_rate:g} req/s, a step to "
          f"{spec.spike_rate:g} req/s at {spec.step_at:g} s held {spec.hold_seconds:g} s and faded over "
          f"{spec.fade_seconds:g} s, {spec.seconds:g} s in all, the same requests to each deployment at once; "
          f"simulator engines ({', '.join(f'{k} {v:g}' for k, v in SIMULATOR.items())}); SLO p95 TTFT {SLO_MS:g} ms\n")
    compressed = ", ".join(f"{k} {POLICY[k]} s (production default {v} s)" for k, v in PRODUCTION.items())
    print(f"time compression: {compressed}; cold start {LOAD_SECONDS:g} s; health and autoscale passes every "
          f"{PASS_SECONDS:g} s (production 5 s); policy {json.dumps(POLICY)}\n")
    print(_surge_settings() + "\n")
    print(f"auto-sched: one schedule window, {SCHEDULE_SERVING} serving from the step ({spec.step_at:g} s) to the end "
          f"of the hold ({spec.step_at + spec.hold_seconds:g} s), lead {SCHEDULE_LEAD_SECONDS:g} s (the modeled cold "
          f"start and a margin); the fade and the rest are the reactive rules\n")
    spike = (spec.step_at, spec.spike_ends)
    print("| deployment | requests | failed | TTFT p95 ms | TTFT p95 ms, spike | back under SLO after s | "
          "instance-s | scale events (up/down) | peak instances | decision → promoted warm instance serves s | "
          "… promoted while still starting s |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|---|---|")
    for r in results:
        back = back_under_slo(r, spec)
        decisions = r.rows.get("decisions", [])
        ups = sum(1 for d in decisions if d["to"] > d["from"])
        promoted, cold = promotion_seconds(r), promotion_seconds(r, warm=False)
        routed = promotion_seconds(r, served=False)
        print(f"| {r.scenario['label']} | {len(r.outcomes)} | {r.failed()} | {p95(r.ttfts_ms()):,.0f} | "
              f"{p95(r.ttfts_ms(*spike)):,.0f} | {'not within the spike' if back is None else f'{back:.0f}'} | "
              f"{r.rows.get('instance_seconds', 0):,.0f} | {len(decisions)} ({ups}/{len(decisions) - ups}) | "
              f"{r.rows.get('peak_instances') or '–'} | "
              f"{' / '.join(f'{s:.1f}' for s in promoted) if promoted else '–'}"
              f"{' (promoted after ' + ' / '.join(f'{s:.1f}' for s in routed) + ')' if routed else ''} | "
              f"{' / '.join(f'{s:.1f}' for s in cold) if cold else '–'} |")
    _print_phases(spec, results)
    _print_over_target(spec, results)
    for r in results:
        steps = ", ".join(f"{d['at'] - began:.0f} s {d['rule']} {d['from']}→{d['to']}"
                          for d in r.rows.get("decisions", []))
        if steps:
            print(f"\n{r.scenario['name']} decisions: {steps}")
    print()
    _first_decisions(results, spec, began)
    _print_targets(results, spec)


def phases(spec) -> list[tuple[str, float, float]]:
    hold_ends = spec.step_at + spec.hold_seconds
    return [("quiet before", 0.0, spec.step_at), ("step and hold", spec.step_at, hold_ends),
            ("fade", hold_ends, spec.spike_ends), ("quiet after", spec.spike_ends, float("inf"))]


def _print_phases(spec, results: list[Result]) -> None:
    """Where each deployment's slow first tokens are: p95 TTFT (and requests, failed) per phase, by send time."""
    found = phases(spec)
    print("\n| TTFT p95 ms by phase (requests) | " + " | ".join(
        f"{name} {begin:g}–{'' if end == float('inf') else f'{end:g}'} s" for name, begin, end in found) + " |")
    print("|---|" + "---:|" * len(found))
    for r in results:
        cells = []
        for _, begin, end in found:
            sent = [o for o in r.outcomes if begin <= o.sent_at < end]
            failed = sum(1 for o in sent if o.ttft is None)
            cells.append(f"{p95(r.ttfts_ms(begin, end)):,.0f} ({len(sent)}{f', {failed} failed' if failed else ''})")
        print(f"| {r.scenario['label']} | " + " | ".join(cells) + " |")


def target_line_ms(fixed: Result) -> float:
    """The p95 target's line: TARGET_TTFT_RATIO × the fixed max fleet's p95 TTFT."""
    return TARGET_TTFT_RATIO * p95(fixed.ttfts_ms())


def over_target(result: Result, fixed: Result, spec) -> tuple[list[int], int]:
    """Requests over the target's line (a failure counts as over), per phase, and how many the p95 target
    allows: the run's p95 is within the line exactly when no more than that many are over (those ranked above
    the p95's own)."""
    line = target_line_ms(fixed)
    over = [o for o in result.outcomes if o.ttft is None or o.ttft * 1000 > line]
    allowed = len(result.outcomes) - 1 - p95_rank(len(result.outcomes))
    return [sum(1 for o in over if begin <= o.sent_at < end) for _, begin, end in phases(spec)], allowed


def _print_over_target(spec, results: list[Result]) -> None:
    """Where the p95 target is won or lost: the requests over its line, per phase, against the number it allows."""
    fixed = next(r for r in results if r.scenario["name"] == "fixed-max")
    found = phases(spec)
    line = target_line_ms(fixed)
    print(f"\n| requests over {TARGET_TTFT_RATIO:g} × the fixed max fleet's p95 ({line:,.0f} ms) | "
          + " | ".join(name for name, _, _ in found) + " | all (the p95 target allows) |")
    print("|---|" + "---:|" * (len(found) + 1))
    for r in results:
        counts, allowed = over_target(r, fixed, spec)
        print(f"| {r.scenario['label']} | " + " | ".join(str(c) for c in counts) + f" | {sum(counts)} ({allowed}) |")


def _surge_settings() -> str:
    from controlplane.demand_signal import NUDGE_MS
    from fleet.autoscaling.policy import SURGE_FACTOR, SURGE_WINDOW_SHARE
    from gateway.metering.demand import TICK_SECONDS

    level = SURGE_FACTOR * POLICY["queue_per_instance"]
    return (f"surge rule (product defaults): {level:g} waiting per instance ({SURGE_FACTOR:g} × the threshold) at "
            f"every look for {SURGE_WINDOW_SHARE * POLICY['up_window_seconds']:g} s "
            f"({SURGE_WINDOW_SHARE:.0%} of the up window, two looks at least); waiting = the engines' count or the "
            f"gateways' streamed requests without a first token, the larger; the gateway publishes its counts every "
            f"{TICK_SECONDS:g} s and asks for a decision at the surge level at most every {NUDGE_MS / 1000:g} s per "
            f"deployment")


def _first_decisions(results: list[Result], spec, began: float) -> None:
    for r in results:
        ups = [d for d in r.rows.get("decisions", []) if d["to"] > d["from"] and d["at"] - began >= spec.step_at]
        if ups:
            print(f"{r.scenario['name']}: first scale-up {ups[0]['at'] - began - spec.step_at:.1f} s after the step "
                  f"({ups[0]['rule']} {ups[0]['from']}→{ups[0]['to']})")


def _print_targets(results: list[Result], spec) -> None:
    found = {r.scenario["name"]: r for r in results}
    fixed = found["fixed-max"]
    print()
    for name in ("auto", "auto-warm", "auto-sched"):
        auto = found[name]
        ratio = p95(auto.ttfts_ms()) / p95(fixed.ttfts_ms())
        spike = p95(auto.ttfts_ms(spec.step_at, spec.spike_ends)) / p95(fixed.ttfts_ms(spec.step_at, spec.spike_ends))
        share = auto.rows.get("instance_seconds", 0) / max(fixed.rows.get("instance_seconds", 0), 1e-9)
        print(f"{name}: TTFT p95 {ratio:.2f}× the fixed max fleet's (target ≤ {TARGET_TTFT_RATIO}: "
              f"{'met' if ratio <= TARGET_TTFT_RATIO else 'missed'}; during the spike {spike:.2f}×), instance-seconds "
              f"{share:.0%} of it (target ≤ {TARGET_INSTANCE_SHARE:.0%}: "
              f"{'met' if share <= TARGET_INSTANCE_SHARE else 'missed'})")
    promoted = promotion_seconds(found["auto-warm"])
    if promoted:
        met = max(promoted) < TARGET_PROMOTION_SECONDS
        print(f"auto-warm: decision → first token served by the promoted instance {max(promoted):.1f} s at most "
              f"(target < {TARGET_PROMOTION_SECONDS:g} s: {'met' if met else 'missed'})")
    else:
        print("auto-warm: no ready warm instance was promoted (target not measured)")


if __name__ == "__main__":
    main()
