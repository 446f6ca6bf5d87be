"""The pure-Python load generator (aiohttp + uvloop), run as its own process by `bench._load`.

    python -m bench._loadgen URL BODY_FILE CONCURRENCY SECONDS     (Authorization from BENCH_AUTHORIZATION)

On 2 cores it can itself become the bottleneck well below what wrk reaches; that is why the
direct-to-engine baseline is always measured with the same generator.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time


async def _worker(session, url: str, body: bytes, headers: dict, deadline: float, latencies: list, failed: list):
    while time.perf_counter() < deadline:
        began = time.perf_counter()
        try:
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                ok = response.status < 400
        except Exception:  # noqa: BLE001 - any failure is one failed request, the run goes on
            ok = False
        latencies.append(time.perf_counter() - began)
        if not ok:
            failed.append(1)


async def _run(url: str, body: bytes, concurrency: int, seconds: float) -> dict:
    import aiohttp

    headers = {"content-type": "application/json"}
    if os.environ.get("BENCH_AUTHORIZATION"):
        headers["authorization"] = os.environ["BENCH_AUTHORIZATION"]
    latencies: list[float] = []
    failed: list[int] = []
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        began = time.perf_counter()
        await asyncio.gather(*(_worker(session, url, body, headers, began + seconds, latencies, failed)
                               for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else 0.0  # noqa: E731
    return {"requests": len(latencies), "seconds": elapsed, "p50_ms": pick(0.50), "p99_ms": pick(0.99),
            "failed": len(failed)}


def main() -> None:
    url, body_file, concurrency, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    with open(body_file, "rb") as f:
        body = f.read()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    print("BENCHJSON " + json.dumps(asyncio.run(_run(url, body, concurrency, seconds))))


if __name__ == "__main__":
    main()
