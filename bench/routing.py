"""Routing policies on a coding workload: the same seeded requests through the real gateway, once per policy.

    .venv/bin/python -m bench routing       # BENCH_ROUTING_SECONDS (30), _RATE (30 req/s), _SEED (7)

Four `python -m simulator` engines with modeled prefill and decode time, prefix caching and a KV
cache too small to hold every repository's prompts (so placement decides what stays cached).
For each policy the engines are restarted (empty caches, zeroed counters), the gateway is
started with that policy for the pool, and the workload (`bench/workload.py`) is replayed open
loop with streaming requests. Deployments have no routing-policy field yet, so the gateway is
started through `bench._gateway_proc`, which sets the pool default; the rest is the real gateway.

Reported per policy: prefix-cache hit ratio (the engines' `vllm:prefix_cache_hits_total /
vllm:prefix_cache_queries_total`), TTFT p50 / p95 measured by the client (first streamed token),
load imbalance: max / mean of requests served per engine, and of the engine's outstanding
requests (running + waiting) averaged over the run, sampled from its /metrics every 0.25 s, and
for prefix_affinity the share of requests placed on their key's home engine (the gateway's
`switchyard_gateway_prefix_affinity_home_total` / `…_spill_total`; the rest spilled over a load bound).
"""
from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from dataclasses import dataclass

from bench import workload
from bench._fleet import Fleet, redis_problem, redis_url
from bench._procs import Processes

POLICIES = ("round_robin", "least_outstanding", "latency_ewma", "prefix_affinity")
ENGINES = 4
ENGINE_ARGS = ("--prefill-ms-per-token", "0.15", "--decode-ms-per-token", "10", "--max-num-seqs", "16",
               "--block-size", "16", "--num-gpu-blocks", "1024", "--max-model-len", "4096")
SAMPLE_SECONDS = 0.25
TARGET_IMBALANCE = 1.25


@dataclass
class PolicyResult:
    policy: str
    sent: int
    failed: int
    ttfts: list[float]
    hit_ratio: float
    requests_per_engine: list[float]
    outstanding_per_engine: list[float]
    preemptions: float
    home_share: float | None  # prefix_affinity: share of keyed requests placed on their key's home engine

    def pct(self, q: float) -> float:
        ordered = sorted(self.ttfts)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


def main() -> None:
    problem = redis_problem(redis_url())
    if problem:
        print(f"routing: Redis at {redis_url()} is unavailable ({problem}); the gateway needs it for limits (skipped)")
        return
    spec = workload.WorkloadSpec.from_env()
    policies = [p for p in os.environ.get("BENCH_ROUTING_POLICIES", ",".join(POLICIES)).split(",") if p]
    results = []
    with Processes() as procs:
        fleet = Fleet(procs)
        try:
            urls = [fleet.start_simulator(*ENGINE_ARGS) for _ in range(ENGINES)]
            fleet.create_rows()
            items = workload.generate(spec, fleet.model)
            for index, policy in enumerate(policies):
                fleet.stop_gateway()
                if index:
                    fleet.restart_simulators()
                fleet.start_gateway(policy)
                results.append(asyncio.run(_run_policy(policy, fleet, urls, items)))
        finally:
            fleet.cleanup()
    _print(spec, items, results)


async def _run_policy(policy: str, fleet: Fleet, engines: list[str], items) -> PolicyResult:
    import aiohttp

    headers = {"authorization": f"Bearer {fleet.key}", "content-type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:
        samples: list[list[float]] = []
        stop = asyncio.Event()
        sampler = asyncio.create_task(_sample_outstanding(session, engines, samples, stop))
        outcomes = await _replay(session, fleet.gateway_url, headers, items)
        stop.set()
        await sampler
        finals = [await _metrics(session, url) for url in engines]
        gateway = await _metrics(session, fleet.gateway_metrics_url, prefix="switchyard_gateway_prefix_affinity_",
                                 path="")
    hits = sum(m.get("vllm:prefix_cache_hits_total", 0) for m in finals)
    queries = sum(m.get("vllm:prefix_cache_queries_total", 0) for m in finals)
    return PolicyResult(
        policy=policy, sent=len(items), failed=sum(1 for ttft in outcomes if ttft is None),
        ttfts=[ttft for ttft in outcomes if ttft is not None], hit_ratio=hits / queries if queries else 0.0,
        requests_per_engine=[m.get("vllm:request_success_total", 0) for m in finals],
        outstanding_per_engine=[statistics.mean(column) for column in zip(*samples)] if samples else [],
        preemptions=sum(m.get("vllm:num_preemptions_total", 0) for m in finals), home_share=_home_share(gateway))


def _home_share(gateway: dict[str, float]) -> float | None:
    home = gateway.get("switchyard_gateway_prefix_affinity_home_total", 0)
    placed = home + gateway.get("switchyard_gateway_prefix_affinity_spill_total", 0)
    return home / placed if placed else None


async def _replay(session, gateway_url: str, headers: dict, items) -> list[float | None]:
    """Send every item at its time (open loop), whatever the earlier ones are doing."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    tasks = []
    for item in items:
        delay = started + item.at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_stream(session, gateway_url + item.endpoint, headers, item.body)))
    return await asyncio.gather(*tasks)


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
    except (OSError, asyncio.TimeoutError, Exception):  # noqa: BLE001 - a failed request is counted, not fatal
        return None
    return first


def _has_token(line: bytes) -> bool:
    if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
        return False
    choices = json.loads(line[6:]).get("choices") or [{}]
    choice = choices[0]
    return bool(choice.get("text") or (choice.get("delta") or {}).get("content"))


async def _sample_outstanding(session, engines: list[str], samples: list, stop: asyncio.Event) -> None:
    while not stop.is_set():
        found = await asyncio.gather(*(_metrics(session, url) for url in engines))
        samples.append([m.get("vllm:num_requests_running", 0) + m.get("vllm:num_requests_waiting", 0)
                        for m in found])
        try:
            await asyncio.wait_for(stop.wait(), SAMPLE_SECONDS)
        except asyncio.TimeoutError:
            pass


async def _metrics(session, url: str, prefix: str = "vllm:", path: str = "/metrics") -> dict[str, float]:
    """Prometheus text → {metric name: value summed over its label sets}, for names starting with prefix."""
    async with session.get(url + path) as response:
        text = await response.text()
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        totals[name] = totals.get(name, 0.0) + float(value)
    return totals


def _imbalance(values: list[float]) -> float:
    mean = statistics.mean(values) if values else 0
    return max(values) / mean if mean else float("nan")


def _print(spec, items, results: list[PolicyResult]) -> None:
    print(f"routing policies: {len(items)} requests of the coding workload (seed {spec.seed}, {spec.developers} "
          f"developers, {spec.repos} repositories, {spec.seconds:g} s at ~{spec.rate:g} req/s, bursty), "
          f"{ENGINES} simulator engines ({' '.join(ENGINE_ARGS)}), all streaming, through the gateway\n")
    print("| policy | prefix-cache hit ratio | TTFT p50 ms | TTFT p95 ms | imbalance requests (max/mean) | "
          "imbalance outstanding (max/mean) | requests per engine | home share | preemptions | failed |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for r in results:
        print(f"| {r.policy} | {r.hit_ratio:.1%} | {r.pct(0.50):.0f} | {r.pct(0.95):.0f} | "
              f"{_imbalance(r.requests_per_engine):.2f} | {_imbalance(r.outstanding_per_engine):.2f} | "
              f"{' / '.join(f'{n:.0f}' for n in r.requests_per_engine)} | "
              f"{'–' if r.home_share is None else f'{r.home_share:.0%}'} | {r.preemptions:.0f} | {r.failed} |")
    found = {r.policy: r for r in results}
    if "prefix_affinity" in found and "round_robin" in found:
        pa, rr = found["prefix_affinity"], found["round_robin"]
        print(f"\nprefix_affinity vs round_robin: hit ratio {pa.hit_ratio:.1%} vs {rr.hit_ratio:.1%} "
              f"({(pa.hit_ratio - rr.hit_ratio) * 100:+.1f} points); prefix_affinity imbalance "
              f"{_imbalance(pa.requests_per_engine):.2f} (requests) / {_imbalance(pa.outstanding_per_engine):.2f} "
              f"(outstanding), target ≤ {TARGET_IMBALANCE}")


if __name__ == "__main__":
    main()
