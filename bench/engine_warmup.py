"""A fresh vLLM engine's first requests, with and without the fleet's warm-up request (fleet/warmup.py).

    BENCH_VLLM=1 .venv/bin/python -m bench engine_warmup     # BENCH_WARMUP_CLIENTS (12)

It starts real vLLM engines (~3 GB each), so it runs only when asked (BENCH_VLLM=1), never as part of
`make bench`; on a shared host run it under the host's slot limiter.

Real CPU vLLM engines (tiny-coder, the registry's flags; .venv-engine), started side by side, then
left idle. Engine A gets a burst of CLIENTS concurrent streamed completions as its very first
requests — what a warm instance promoted in a burst got before fleet/warmup.py. Engine B first gets
the fleet's warm-up request (its body, sent as the fleet sends it), then the same burst. Finally A
gets the burst again: an engine that has served, the reference. Bursts run one after another.
Reported per case: the first token of the first answer and the TTFT p50 / max over the burst,
measured by the client from the moment the burst starts.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench._procs import free_port, stop, wait_http
from controlplane.cpu_engine_env import cpu_engine_env

CLIENTS = int(os.environ.get("BENCH_WARMUP_CLIENTS", "12"))
MAX_TOKENS = 32
START_SECONDS = 900  # a loaded 2-core host stretches vLLM's ~45-s start a lot
VLLM_ENV = cpu_engine_env(kv_cache_gib=1)  # unpinned, one OpenMP thread: as the local runtime starts engines


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()


def _engine_argv(model_dir: Path, port: int) -> list[str]:
    from models_registry.engine_args import render_vllm_argv
    from models_registry.models import Model, ModelFamily, ModelVersion
    from models_registry.services import TINY_CODER, TINY_CODER_ENGINE_ARGS

    version = ModelVersion(model=Model(name=TINY_CODER, family=ModelFamily.LLAMA), version="v1", dtype="float32",
                           artifact_uri=str(model_dir), engine_args=TINY_CODER_ENGINE_ARGS)
    return render_vllm_argv(version, model_path=str(model_dir), served_model_name=TINY_CODER, port=port)


def _start(python: str, argv: list[str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen([python, "-m", "vllm.entrypoints.openai.api_server", *argv],
                                env={**os.environ, **VLLM_ENV}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _ttfts(url: str, model: str) -> list[float]:
    """CLIENTS concurrent streamed completions; each one's seconds from the burst's start to its first token."""
    body = {"model": model, "prompt": "def quicksort(items):", "max_tokens": MAX_TOKENS, "ignore_eos": True,
            "stream": True}
    start, results, lock = time.monotonic(), [], threading.Lock()

    def one() -> None:
        with httpx.Client(timeout=300) as client, client.stream("POST", url + "/v1/completions", json=body) as answer:
            first = None
            for line in answer.iter_lines():
                if first is None and line.startswith("data: {"):
                    first = time.monotonic() - start
            if answer.status_code != 200 or first is None:
                raise RuntimeError(f"engine answered {answer.status_code}")
            with lock:
                results.append(first)

    threads = [threading.Thread(target=one) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if len(results) != CLIENTS:
        raise RuntimeError("a request of the burst failed")
    return sorted(results)


def _warm_up(url: str, model: str) -> float:
    from fleet.warmup import warm_up_body

    started = time.monotonic()
    httpx.post(url + "/v1/completions", json=warm_up_body(model), timeout=300).raise_for_status()
    return time.monotonic() - started


def main() -> None:
    if os.environ.get("BENCH_VLLM") != "1":
        print("skipped: it starts real vLLM engines; set BENCH_VLLM=1 to run it")
        return
    _setup_django()
    from django.conf import settings
    from django.core.management import call_command

    from models_registry.services import TINY_CODER

    python = settings.SWITCHYARD_ENGINE_PYTHON
    if not Path(python).exists():
        raise SystemExit(f"{python} not found: build the engine venv first (make engine)")
    work = Path(tempfile.mkdtemp(prefix="bench-warmup-"))
    call_command("make_tiny_model", str(work / "tiny-coder"), python=python)
    procs, urls = [], []
    try:
        for name in ("a", "b"):
            port = free_port()
            procs.append(_start(python, _engine_argv(work / "tiny-coder", port), work / f"engine-{name}.log"))
            urls.append(f"http://127.0.0.1:{port}")
        for proc, url, name in zip(procs, urls, "ab"):
            wait_http(url + "/health", proc=proc, timeout=START_SECONDS, interval=1.0,
                      output=lambda name=name: (work / f"engine-{name}.log").read_text()[-3000:])
        time.sleep(5)  # both idle: start-up work done
        rows = [("A: fresh engine, burst first", None, _ttfts(urls[0], TINY_CODER))]
        warm = _warm_up(urls[1], TINY_CODER)
        rows.append(("B: fresh engine, warm-up request, then burst", warm, _ttfts(urls[1], TINY_CODER)))
        rows.append(("A again: an engine that has served (reference)", None, _ttfts(urls[0], TINY_CODER)))
    finally:
        for proc in procs:
            stop(proc, grace=30)
    print(f"{CLIENTS} concurrent streamed completions of {MAX_TOKENS} tokens per burst; "
          "seconds from the burst's start\n")
    print("| case | warm-up request | first token of the first answer | TTFT p50 | TTFT max |")
    print("|---|---|---|---|---|")
    for name, warm_seconds, ttfts in rows:
        warm_text = f"{warm_seconds:.2f} s" if warm_seconds is not None else "—"
        print(f"| {name} | {warm_text} | {ttfts[0]:.2f} s | {statistics.median(ttfts):.2f} s | {ttfts[-1]:.2f} s |")
