"""CPU vLLM engines are not pinned to one core: every engine of every install shared core 0 under vLLM's
default binding on a 2-core host while core 1 idled (controlplane/cpu_engine_env.py, docs/fleet.md)."""
import os
from pathlib import Path

import pytest

from controlplane.cpu_engine_env import cpu_bind_setting, cpu_engine_env
from controlplane.env import ImproperSetting
from fleet.runtime.local import LocalBackend


def test_local_engines_start_unpinned_with_as_many_threads_as_cores_they_claim(settings):
    settings.SWITCHYARD_ENGINE_CPU_BIND = "nobind"
    settings.SWITCHYARD_ENGINE_CPUS = 2
    settings.SWITCHYARD_ENGINE_CPU_KVCACHE_GIB = 3
    env = LocalBackend().extra_env(instance=None)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert (env["OMP_NUM_THREADS"], env["VLLM_CPU_KVCACHE_SPACE"]) == ("2", "3")
    settings.SWITCHYARD_ENGINE_CPUS = 0  # admitted on memory alone: still one thread, not OpenMP's all-cores default
    assert LocalBackend().extra_env(instance=None)["OMP_NUM_THREADS"] == "1"


def test_an_explicit_binding_is_left_to_vllm():
    env = cpu_engine_env(kv_cache_gib=1, bind="0-3", threads=2)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-3" and "OMP_NUM_THREADS" not in env  # vLLM derives it from the list


@pytest.mark.parametrize("value", ["nobind", "auto", "0", "0-3", "0,2|1,3", "0-1,4-5|2-3,6-7"])
def test_vllms_binding_forms_are_accepted(value):
    assert cpu_bind_setting(value, "V") == value


@pytest.mark.parametrize("value", ["", "none", "0-", "a-b", "0|", "0,,1", " 0", "auto|0"])
def test_anything_else_fails_at_start_naming_the_variable(value):
    with pytest.raises(ImproperSetting, match="SWITCHYARD_ENGINE_CPU_BIND must be"):
        cpu_bind_setting(value, "SWITCHYARD_ENGINE_CPU_BIND")


def descendants(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid] + [d for child in children for d in descendants(int(child))]


def allowed_cpus(pid: int, tid: str) -> str:
    status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    return next(line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("Cpus_allowed_list"))


@pytest.mark.vllm
def test_no_thread_of_a_running_engine_is_pinned(tiny_vllm):
    """The session's real engine, started as tests/processes.py starts every test engine (the same env as the local
    runtime's): every thread of the API server, engine core and worker may run on every core the host gives us."""
    ours = allowed_cpus(os.getpid(), str(os.getpid()))
    threads = {(pid, tid): allowed_cpus(pid, tid) for pid in descendants(tiny_vllm.pid)
               for tid in os.listdir(f"/proc/{pid}/task")}
    assert len({pid for pid, _ in threads}) >= 3  # API server, engine core, worker (at least)
    pinned = {key: cpus for key, cpus in threads.items() if cpus != ours}
    assert pinned == {}, f"pinned threads (the host allows {ours}): {pinned}"
