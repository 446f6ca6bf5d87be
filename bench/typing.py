"""Superseded completions on a typing trace: the same seeded keystrokes through the real gateway, once with
supersession off and once on (docs/supersession.md).

    .venv/bin/python -m bench typing     # BENCH_TYPING_DEVELOPERS (12), _SECONDS (30), _SEED (5)

Developers type in bursts: a burst is a few to a dozen keystrokes 60–200 ms apart, then a pause
(exponential, mean 2.5 s), in one file of a repository. Every keystroke is a streamed `/v1/completions`
request (max_tokens 48) carrying the developer's editor session (`x-switchyard-session`: developer +
file) — as an IDE plugin sends them. One `python -m simulator` engine with modelled prefill and decode
time and 16 sequences at most. The gateway and rows are the same for both runs; the engine is restarted
between them (empty cache, zeroed counters). The baseline sends every request with
`x-switchyard-interactive: false` (never superseded); the other run sends them as they are (completions
are interactive by default, the tenant's setting is on).

Reported per run, from the engine's own /metrics: engine sequence-seconds (∫ `vllm:num_requests_running`
dt, sampled every 0.1 s: how long requests held a batch slot and their KV blocks), busy seconds (time with
any request running), tokens generated (`vllm:generation_tokens_total`); from the client: requests
completed and superseded, p95 TTFT of the surviving requests — the completions the editor shows, i.e. each
burst's last keystroke — and of every completed request.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import time
from dataclasses import dataclass, field

from bench import workload
from bench._fleet import Fleet, redis_problem, redis_url
from bench._procs import Processes

ENGINE_ARGS = ("--prefill-ms-per-token", "0.1", "--decode-ms-per-token", "15", "--max-num-seqs", "16",
               "--num-gpu-blocks", "4096")
SAMPLE_SECONDS = 0.1
MAX_TOKENS = 48


@dataclass(frozen=True)
class TypingSpec:
    seed: int = 5
    developers: int = 12
    seconds: float = 30.0
    mean_burst: float = 8.0  # keystrokes per burst
    key_gap: tuple[float, float] = (0.06, 0.2)  # seconds between keystrokes of a burst (uniform)
    mean_pause: float = 2.5  # seconds between bursts (exponential)
    files: int = 4  # files per developer

    @classmethod
    def from_env(cls) -> "TypingSpec":
        return cls(developers=int(os.environ.get("BENCH_TYPING_DEVELOPERS", cls.developers)),
                   seconds=float(os.environ.get("BENCH_TYPING_SECONDS", cls.seconds)),
                   seed=int(os.environ.get("BENCH_TYPING_SEED", cls.seed)))


@dataclass(frozen=True, slots=True)
class Stroke:
    at: float
    session: str
    prompt: str
    final: bool  # the burst's last keystroke: the completion the developer waits for


def typing_trace(spec: TypingSpec) -> list[Stroke]:
    """Every developer's keystrokes over `spec.seconds`, in time order (seeded)."""
    rng = random.Random(spec.seed)
    strokes: list[Stroke] = []
    for developer in range(spec.developers):
        at = rng.uniform(0, spec.mean_pause)
        while at < spec.seconds:
            file = rng.randrange(spec.files)
            header = f"# repo {developer % 4}: " + " ".join(rng.choice(workload.WORDS) for _ in range(60)) + "\n"
            line = " ".join(rng.choice(workload.WORDS) for _ in range(12))
            count = max(1, min(30, round(rng.expovariate(1 / spec.mean_burst))))
            for index in range(count):
                strokes.append(Stroke(at, f"dev-{developer}-file-{file}", header + line[:index + 1],
                                      index == count - 1))
                at += rng.uniform(*spec.key_gap)
            at += rng.expovariate(1 / spec.mean_pause)
    return sorted(strokes, key=lambda s: s.at)


@dataclass
class RunResult:
    name: str
    sent: int = 0
    completed: int = 0
    superseded: int = 0
    failed: int = 0
    failures: dict = field(default_factory=dict)  # what the failed requests got: status or error code -> count
    ttft_final: list[float] = field(default_factory=list)
    ttft_all: list[float] = field(default_factory=list)
    seq_seconds: float = 0.0
    busy_seconds: float = 0.0
    generated: float = 0.0
    wall: float = 0.0


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1000 if ordered else float("nan")


def main() -> None:
    problem = redis_problem(redis_url())
    if problem:
        print(f"typing: Redis at {redis_url()} is unavailable ({problem}); supersession needs it (skipped)")
        return
    spec = TypingSpec.from_env()
    strokes = typing_trace(spec)
    results = []
    with Processes() as procs:
        fleet = Fleet(procs, model="typing-coder")
        try:
            engine = fleet.start_simulator(*ENGINE_ARGS)
            fleet.create_rows()
            fleet.start_gateway()
            for index, (name, interactive) in enumerate((("supersession off", False), ("supersession on", True))):
                if index:
                    fleet.restart_simulators()
                results.append(asyncio.run(_run(name, interactive, fleet, engine, strokes)))
        finally:
            fleet.cleanup()
    _print(spec, strokes, results)
    _print_overhead(_overhead())


async def _run(name: str, interactive: bool, fleet: Fleet, engine: str, strokes: list[Stroke]) -> RunResult:
    import aiohttp

    headers = {"authorization": f"Bearer {fleet.key}", "content-type": "application/json"}
    if not interactive:
        headers["x-switchyard-interactive"] = "false"
    result = RunResult(name, sent=len(strokes))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=300)) as session:
        before = await _counter(session, engine, "vllm:generation_tokens_total")
        stop = asyncio.Event()
        sampler = asyncio.create_task(_sample(session, engine, result, stop))
        began = time.monotonic()
        await _replay(session, fleet.gateway_url, headers, strokes, result)
        result.wall = time.monotonic() - began
        while await _counter(session, engine, "vllm:num_requests_running") > 0:  # until the engine is idle
            await asyncio.sleep(SAMPLE_SECONDS)
        stop.set()
        await sampler
        result.generated = await _counter(session, engine, "vllm:generation_tokens_total") - before
    return result


async def _replay(session, url: str, headers: dict, strokes: list[Stroke], result: RunResult) -> None:
    """Send every keystroke at its time (open loop), whatever the earlier ones are doing."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    tasks = []
    for stroke in strokes:
        delay = started + stroke.at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_send(session, url, headers, stroke, result)))
    await asyncio.gather(*tasks)


async def _send(session, url: str, headers: dict, stroke: Stroke, result: RunResult) -> None:
    body = {"model": "typing-coder", "prompt": stroke.prompt, "max_tokens": MAX_TOKENS, "stream": True}
    began, first, finished, superseded, problem = time.monotonic(), None, False, False, "no answer"
    try:
        async with session.post(url + "/v1/completions", json=body,
                                headers={**headers, "x-switchyard-session": stroke.session}) as response:
            if response.status != 200:
                superseded = response.status == 410
                problem = f"{response.status} {_code(await response.read())}"
            else:
                async for line in response.content:
                    event = _event(line)
                    if event is None:
                        continue
                    if "error" in event:
                        superseded = event["error"].get("code") == "superseded"
                        problem = f"stream {event['error'].get('code')}"
                        break
                    choice = (event.get("choices") or [{}])[0]
                    if first is None and choice.get("text"):
                        first = time.monotonic() - began
                    finished = finished or bool(choice.get("finish_reason"))
    except Exception as error:  # noqa: BLE001 — a failed request is counted, not fatal
        problem = type(error).__name__
    if superseded:
        result.superseded += 1
    elif finished and first is not None:
        result.completed += 1
        result.ttft_all.append(first)
        if stroke.final:
            result.ttft_final.append(first)
    else:
        result.failed += 1
        result.failures[problem] = result.failures.get(problem, 0) + 1


def _code(body: bytes) -> str:
    try:
        return json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return "?"


def _event(line: bytes) -> dict | None:
    if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
        return None
    return json.loads(line[6:])


async def _sample(session, engine: str, result: RunResult, stop: asyncio.Event) -> None:
    last = time.monotonic()
    while not stop.is_set():
        running = await _counter(session, engine, "vllm:num_requests_running")
        now = time.monotonic()
        result.seq_seconds += running * (now - last)
        result.busy_seconds += (now - last) if running else 0.0
        last = now
        try:
            await asyncio.wait_for(stop.wait(), SAMPLE_SECONDS)
        except asyncio.TimeoutError:
            pass


async def _counter(session, engine: str, name: str) -> float:
    async with session.get(engine + "/metrics") as response:
        text = await response.text()
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"))


def _print(spec: TypingSpec, strokes: list[Stroke], results: list[RunResult]) -> None:
    finals = sum(1 for s in strokes if s.final)
    print(f"typing trace: {len(strokes)} keystrokes ({finals} bursts) of {spec.developers} developers over "
          f"{spec.seconds:g} s (seed {spec.seed}; bursts of ~{spec.mean_burst:g} keys {spec.key_gap[0]:g}–"
          f"{spec.key_gap[1]:g} s apart, pauses ~{spec.mean_pause:g} s), streamed completions of {MAX_TOKENS} "
          f"tokens, one simulator engine ({' '.join(ENGINE_ARGS)}), through the gateway\n")
    print("| run | engine seq-seconds | engine busy s | tokens generated | completed | superseded | failed | "
          "p95 TTFT shown completions ms | p95 TTFT all completed ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r.name} | {r.seq_seconds:.1f} | {r.busy_seconds:.1f} | {r.generated:.0f} | {r.completed} | "
              f"{r.superseded} | {r.failed} | {p95(r.ttft_final):.0f} | {p95(r.ttft_all):.0f} |")
    for r in results:
        if r.failures:
            print(f"\n{r.name}: failed requests got " + ", ".join(f"{k} × {v}" for k, v in sorted(r.failures.items())))
    if len(results) == 2 and results[0].seq_seconds:
        off, on = results
        print(f"\nsupersession saves {1 - on.seq_seconds / off.seq_seconds:.0%} of engine sequence-seconds and "
              f"{1 - on.generated / off.generated:.0%} of generated tokens; p95 TTFT of the completions shown "
              f"{p95(off.ttft_final):.0f} → {p95(on.ttft_final):.0f} ms")


OVERHEAD_REQUESTS, OVERHEAD_ROUNDS = 100, 3


def _overhead() -> dict[str, list[float]]:
    """The hot-path cost: sequential non-streamed completions (c=1, one keep-alive connection) against an
    engine with no modelled time, each with a session of its own (nothing to cancel) — interactive, or
    marked `x-switchyard-interactive: false` — alternating rounds; latencies in ms per kind."""
    import httpx

    latencies: dict[str, list[float]] = {"not interactive (no Redis command)": [], "interactive (one EVAL)": []}
    with Processes() as procs:
        fleet = Fleet(procs, model="typing-coder")
        try:
            fleet.start_simulator("--prefill-ms-per-token", "0", "--decode-ms-per-token", "0", "--max-num-seqs", "256")
            fleet.create_rows()
            fleet.start_gateway()
            body = {"model": "typing-coder", "prompt": "def add(a, b):", "max_tokens": 4}
            with httpx.Client(timeout=30, headers={"authorization": f"Bearer {fleet.key}"}) as client:
                for _ in range(50):  # warm-up: key cache, connections, scripts loaded
                    client.post(fleet.gateway_url + "/v1/completions", json=body)
                for round_ in range(OVERHEAD_ROUNDS):
                    for kind, flag in (("not interactive (no Redis command)", "false"),
                                       ("interactive (one EVAL)", "true")):
                        for n in range(OVERHEAD_REQUESTS):
                            headers = {"x-switchyard-session": f"s-{round_}-{n}", "x-switchyard-interactive": flag}
                            began = time.perf_counter()
                            answer = client.post(fleet.gateway_url + "/v1/completions", json=body, headers=headers)
                            latencies[kind].append((time.perf_counter() - began) * 1000)
                            if answer.status_code != 200:
                                raise RuntimeError(f"overhead request failed: {answer.status_code} {answer.text}")
        finally:
            fleet.cleanup()
    return latencies


def _print_overhead(latencies: dict[str, list[float]]) -> None:
    print(f"\nhot-path cost: {OVERHEAD_ROUNDS} alternating rounds of {OVERHEAD_REQUESTS} sequential non-streamed "
          "completions (max_tokens 4) per kind, one connection, an engine with no modelled time, a session per "
          "request (nothing superseded)\n")
    print("| requests | p50 ms | p90 ms | p99 ms | mean ms |")
    print("|---|---:|---:|---:|---:|")
    for kind, values in latencies.items():
        ordered = sorted(values)
        p50, p90, p99 = (ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.5, 0.9, 0.99))
        print(f"| {kind} | {p50:.2f} | {p90:.2f} | {p99:.2f} | {sum(ordered) / len(ordered):.2f} |")
