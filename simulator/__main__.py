"""CLI: ``python -m simulator --port 8001 --served-model-name my-model``."""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Optional, Sequence

from .config import SCHEDULING_POLICIES, SimulatorConfig

HELP = {
    "served_model_name": "model id served under /v1/models and required in requests",
    "host": "interface to bind",
    "port": "TCP port to listen on",
    "max_num_seqs": "maximum concurrently running sequences (batch size)",
    "block_size": "tokens per KV-cache block",
    "num_gpu_blocks": "number of KV-cache blocks",
    "max_model_len": "maximum prompt+completion length per request",
    "max_num_batched_tokens": "token budget per engine step (chunked prefill)",
    "prefill_ms_per_token": "modeled prefill cost per uncached prompt token (ms)",
    "decode_ms_per_token": "modeled decode step time for a batch of one (ms)",
    "batch_alpha": "decode step grows by this fraction per extra running sequence",
    "scheduling_policy": "waiting-queue order",
    "eos_probability": "per-token probability of ending early with finish_reason=stop",
    "seed": "base seed for generated text",
    "max_num_queued_reqs": "requests waiting or running past which a new one gets vLLM's 503 (0: no limit)",
    "fail_after_tokens": "fault injection: every generation fails after this many tokens, with vLLM's error "
                         "event in a stream and its 500 otherwise (0: off)",
    "error_rate": "fault injection: share of generation requests answered with vLLM's 500 at once (0: off)",
    "latency_multiplier": "fault injection: every modeled prefill and decode step takes this many times as long",
    "hang_after_first_byte": "fault injection: share of generation requests that stall after their first byte "
                             "(a stream's first token; a whole answer's headers and first body byte) and never "
                             "finish, holding their slot until the client disconnects (0: off)",
    "load_seconds": "modeled model load: the port opens only after this many seconds, as a real engine's "
                    "does once its weights are loaded (cold-start benchmarks)",
    "log_level": "log level of the HTTP server",
    "record_requests": "append every generation request received (headers and body) to this file",
}


def build_parser() -> argparse.ArgumentParser:
    """Argument parser whose flags mirror SimulatorConfig fields."""
    parser = argparse.ArgumentParser(prog="python -m simulator",
                                     description="Simulated vLLM OpenAI-compatible server (not vLLM).")
    defaults = SimulatorConfig()
    for f in fields(SimulatorConfig):
        if f.name == "enable_prefix_caching":
            continue
        default = getattr(defaults, f.name)
        kwargs = {"type": type(default), "default": default, "help": f"{HELP[f.name]} (default: %(default)s)"}
        if f.name == "scheduling_policy":
            kwargs["choices"] = SCHEDULING_POLICIES
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, **kwargs)
    parser.add_argument("--enable-prefix-caching", dest="enable_prefix_caching",
                        action=argparse.BooleanOptionalAction, default=True,
                        help="automatic prefix caching (default: enabled)")
    return parser


def parse_config(argv: Optional[Sequence[str]] = None) -> SimulatorConfig:
    """Parse CLI arguments into a SimulatorConfig."""
    return SimulatorConfig(**vars(build_parser().parse_args(argv)))


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Serve the simulator with the gateway's lean HTTP/1.1 server (gateway/server/: uvloop + httptools)."""
    import logging

    from gateway.server import HttpServer

    from .app import build_app

    config = parse_config(argv)
    if config.load_seconds:
        import time

        time.sleep(config.load_seconds)  # nothing listens yet: probes see a refused connection, as with vLLM
    logging.getLogger("gateway.server").setLevel(config.log_level.upper())
    HttpServer(build_app(config), host=config.host, port=config.port).run()


if __name__ == "__main__":
    main()
