"""The environment a CPU vLLM engine is started with, for every place that starts one.

vLLM's CPU worker pins its OpenMP threads by default (`VLLM_CPU_OMP_THREADS_BIND=auto`): on a
2-core host it binds every engine to core 0 and leaves core 1 "reserved", so two or three engines
started by one or several installs all share one core while the other idles. One engine's start
next to a busy one was seen taking 8.5 min between the engine core's start and its worker's first
line. `nobind` leaves placement to the kernel and gives each engine `threads` OpenMP threads
(docs/fleet.md, "CPU placement").
"""
from __future__ import annotations

import re

from controlplane.env import ImproperSetting

NOBIND = "nobind"
# vLLM's own forms: "auto", "nobind", or CPU id lists per rank such as "0-3" or "0,2|1,3".
_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*(\|\d+(-\d+)?(,\d+(-\d+)?)*)*$")


def cpu_bind_setting(value: str, name: str) -> str:
    """`value` if vLLM understands it, else ImproperSetting naming the variable (checked at start)."""
    if value in ("auto", NOBIND) or _CPU_LIST.match(value):
        return value
    raise ImproperSetting(f"{name} must be nobind, auto or CPU id lists such as 0-3 or 0,2|1,3, got {value!r}")


def cpu_engine_env(*, kv_cache_gib: int, bind: str = NOBIND, threads: int = 1) -> dict[str, str]:
    env = {"VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "VLLM_CPU_OMP_THREADS_BIND": bind,
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if bind == NOBIND:  # unpinned: the thread count is ours to set (vLLM sets it from the CPU list otherwise)
        env["OMP_NUM_THREADS"] = str(max(1, threads))
    return env
