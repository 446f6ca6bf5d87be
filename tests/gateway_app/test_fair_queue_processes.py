"""Acceptance: fair shares of a saturated pool across two gateway processes, three tenants of unequal load.

Real processes end to end (bench/_fleet.py: a throwaway SQLite install, one simulator engine with
modelled decode time, two `python -m gateway` processes on the same install and the same Redis).
The heavy tenant runs 32 closed-loop clients, half through each gateway; both light tenants run 6
each, through the first gateway only. The pool's capacity is 4 slots (4 per engine, 1 engine).

With the shared queue (the default) each tenant gets a third of the requests served while all
three are backlogged, whichever gateway its requests hit: the test asserts each share within
±25 % of 1/3 over the first COUNT requests answered after a warm-up (a count, not a duration: the
host's speed varies a lot). "Backlogged" is checked, not assumed: the first gateway's
`queue_depth` gauge is sampled through the window, and a light tenant with no request waiting in
more than a quarter of the samples fails the test as a harness problem (its clients could not keep
up), not as a fairness one. Per process alone (the shared queue turned off), the second gateway
serves the heavy tenant by itself and it takes about two thirds: a shorter run shows that too.
"""
from __future__ import annotations

import statistics
import threading
import time
from collections import defaultdict

import httpx
import pytest

from bench._fleet import Fleet, redis_problem, redis_url
from bench._procs import Processes

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(redis_problem(redis_url()) is not None, reason="needs Redis")]
# Light tenants run 6 clients each for a fair share of 4/3 slots, so each keeps requests waiting while
# a client re-sends on a loaded host; the heavy one runs 32 (over 5x), 16 through each gateway.
HEAVY_PER_GATEWAY, LIGHT = 16, 6
WARMUP, HANG_GUARD = 2.0, 300.0  # s
COUNT, PER_PROCESS_COUNT = 120, 60  # requests served in the measured window: shared queue, per process
FAIR, TOLERANCE = 1 / 3, 0.25  # the acceptance band


@pytest.fixture(scope="module")
def fleet():
    with Processes() as procs:
        fleet = Fleet(procs, model="fair-coder")
        try:
            # ~0.5 s per request (5 tokens x 100 ms): the gateway's 4 slots, not the engine, are the limit,
            # and a client's own time between two requests is small beside its wait (it stays backlogged).
            fleet.start_simulator("--prefill-ms-per-token", "0", "--decode-ms-per-token", "100",
                                  "--max-num-seqs", "256")
            fleet.create_rows(tenants=3)
            yield fleet
        finally:
            fleet.cleanup()


def gateways(fleet: Fleet, *, shared: bool) -> list[tuple[object, str]]:
    env = {"SWITCHYARD_GATEWAY_QUEUE_SHARED": "1" if shared else "0",
           # shared: 4 slots for the pool, 2 taken unasked by each process; alone: 2 per process
           "SWITCHYARD_GATEWAY_QUEUE_INFLIGHT_PER_INSTANCE": "4" if shared else "2"}
    return [fleet.extra_gateway(env=env) for _ in range(2)]


def run_load(fleet: Fleet, urls: list[str], count: int, on_window=None) -> tuple[dict, dict, list]:
    """Closed-loop clients; (served per tenant in the measured window, latencies per tenant, failures).
    `on_window(enough)` runs in a thread of its own from the window's start until `enough` is set."""
    heavy, light1, light2 = fleet.keys
    plan = [(heavy, urls[0])] * HEAVY_PER_GATEWAY + [(heavy, urls[1])] * HEAVY_PER_GATEWAY + \
        [(light1, urls[0])] * LIGHT + [(light2, urls[0])] * LIGHT
    names = {heavy: "heavy", light1: "light1", light2: "light2"}
    served, latencies, failures = defaultdict(int), defaultdict(list), []
    lock = threading.Lock()
    counting_from, enough = time.monotonic() + WARMUP, threading.Event()
    body = {"model": fleet.model, "prompt": "def add(a, b):", "max_tokens": 5, "ignore_eos": True}

    def client(key: str, url: str) -> None:
        with httpx.Client(timeout=60, headers={"authorization": f"Bearer {key}"}) as http:
            while not enough.is_set():
                sent = time.monotonic()
                response = http.post(url + "/v1/completions", json=body)
                done = time.monotonic()
                with lock:
                    if response.status_code != 200:
                        failures.append(response.status_code)
                    elif done >= counting_from and not enough.is_set():
                        served[names[key]] += 1
                        latencies[names[key]].append(done - sent)
                        if sum(served.values()) >= count:
                            enough.set()

    threads = [threading.Thread(target=client, args=pair) for pair in plan]
    if on_window is not None:
        threads.append(threading.Thread(target=lambda: (time.sleep(WARMUP), on_window(enough))))
    for thread in threads:
        thread.start()
    enough.wait(HANG_GUARD)
    enough.set()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a client hung"
    return dict(served), dict(latencies), failures


def report(label: str, served: dict, latencies: dict) -> dict:
    total = sum(served.values())
    shares = {tenant: served[tenant] / total for tenant in sorted(served)}
    medians = {tenant: round(statistics.median(values), 3) for tenant, values in sorted(latencies.items())}
    print(f"{label}: served {served}, shares { {t: round(s, 3) for t, s in shares.items()} }, "
          f"median latency s {medians}")
    return shares


class DepthSampler:
    """Samples a gateway's `switchyard_gateway_queue_depth{tenant}` gauges (who has requests waiting)."""

    def __init__(self, metrics_url: str):
        self.url, self.samples = metrics_url, []

    def __call__(self, enough: threading.Event) -> None:
        with httpx.Client(timeout=10) as http:
            while not enough.wait(0.1):
                self.samples.append(self.depths(http.get(self.url).text))

    @staticmethod
    def depths(text: str) -> dict[str, float]:
        found = {}
        for line in text.splitlines():
            if line.startswith("switchyard_gateway_queue_depth{"):
                labels, value = line.rsplit(" ", 1)
                found[labels.split('tenant="', 1)[1].split('"', 1)[0]] = float(value)
        return found

    def idle_fraction(self, tenant: str) -> float:
        """Share of the samples in which `tenant` had no request waiting."""
        return sum(1 for s in self.samples if s.get(tenant, 0) < 1) / max(1, len(self.samples))


def test_three_tenants_get_fair_shares_across_two_gateway_processes(fleet):
    procs = fleet.procs
    started = gateways(fleet, shared=False)
    served, latencies, failures = run_load(fleet, [url for _, url in started], PER_PROCESS_COUNT)
    per_process = report("per-process fairness", served, latencies)
    print_gateway_figures(fleet, started)
    for proc, _ in started:
        procs.stop(proc)
    assert not failures, failures
    assert per_process["heavy"] > 0.5, per_process  # B's two slots its own, plus its turns of A's: about 2/3

    started = gateways(fleet, shared=True)
    sampler = DepthSampler(fleet.metrics_urls[started[0][0].pid])
    served, latencies, failures = run_load(fleet, [url for _, url in started], COUNT, on_window=sampler)
    shared = report("shared fairness", served, latencies)
    print_gateway_figures(fleet, started)
    assert not failures, failures
    assert sum(served.values()) == COUNT, served
    # The light tenants are the ones waiting on the first gateway only (the heavy one waits on both).
    light_ids = sorted({t for s in sampler.samples for t in s} - heavy_ids(fleet, started[1][0]))
    idle = {tenant: round(sampler.idle_fraction(tenant), 3) for tenant in light_ids}
    print(f"depth samples {len(sampler.samples)}, share of samples with no light request waiting {idle}")
    assert len(light_ids) == 2 and all(f <= 0.25 for f in idle.values()), \
        f"the light tenants' clients did not keep requests waiting (harness, not fairness): {idle}"
    for tenant in ("heavy", "light1", "light2"):
        assert FAIR * (1 - TOLERANCE) <= shared[tenant] <= FAIR * (1 + TOLERANCE), (shared, per_process)
    # The light tenants' waits are bounded by their own backlog, not the heavy tenant's fivefold one.
    heavy_median = statistics.median(latencies["heavy"])
    for tenant in ("light1", "light2"):
        assert statistics.median(latencies[tenant]) < heavy_median, latencies


def print_gateway_figures(fleet: Fleet, started) -> None:
    """Per gateway, the mean seconds a request spent out of the queue (its slot held: request − queue
    wait), and how often the shared queue fell back to per-process fairness (Redis slow or away)."""
    means, fallbacks = [], []
    for proc, _ in started:
        text = httpx.get(fleet.metrics_urls[proc.pid], timeout=10).text
        total = {name: sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                           if line.split("{")[0].split(" ")[0] == f"switchyard_gateway_{name}")
                 for name in ("request_seconds_sum", "request_seconds_count", "queue_wait_seconds_sum",
                              "fair_queue_local_fallbacks_total")}
        fallbacks.append(total["fair_queue_local_fallbacks_total"])
        means.append(round((total["request_seconds_sum"] - total["queue_wait_seconds_sum"])
                           / max(1.0, total["request_seconds_count"]), 3))
    print(f"  mean seconds a request held its slot, per gateway: {means}; fallbacks to per-process: {fallbacks}")


def heavy_ids(fleet: Fleet, second_gateway) -> set[str]:
    """Tenants with a queue-depth gauge on the second gateway: only the heavy one sends there."""
    text = httpx.get(fleet.metrics_urls[second_gateway.pid], timeout=10).text
    return set(DepthSampler.depths(text))
