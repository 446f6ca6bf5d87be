"""bench._cpu: CPU per request of process trees, read from /proc (the gateway benchmark's CPU table)."""
import os
import signal
import subprocess
import sys
import time

import pytest

from bench import _cpu

pytestmark = pytest.mark.skipif(not _cpu.available(), reason="needs Linux /proc")

SPIN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"
LINGER = "__import__('time').sleep(60)\n"  # then stays alive, visible in /proc, until killed


def _spinner(seconds: float, children: int = 0, linger: bool = False) -> subprocess.Popen:
    """A process that burns `seconds` of CPU, with `children` child processes burning as much each;
    with `linger`, all of them then wait (alive) until killed."""
    code = SPIN.format(seconds=seconds) + (LINGER if linger else "")
    if children:
        code = (f"import subprocess, sys\nkids = [subprocess.Popen([sys.executable, '-c', {code!r}]) "
                f"for _ in range({children})]\n{code}")  # the children share the spinner's session
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def _wait_for_children(proc: subprocess.Popen, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(_cpu._tree([proc.pid], _cpu._parents())) < count + 1 and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_process_tree_counts_whole_and_its_busy_processes_are_counted():
    proc = _spinner(1.0, children=2, linger=True)
    try:
        _wait_for_children(proc, 2)
        tree = _cpu._tree([proc.pid], _cpu._parents())
        meter = _cpu.CpuMeter({"spinners": [proc.pid]})
        before = sum(_cpu._cpu_seconds(pid) for pid in tree)
        meter.start()
        deadline = time.monotonic() + 30  # until the three have spent 1.5 s between them: each still spins
        while sum(_cpu._cpu_seconds(pid) for pid in tree) - before < 1.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        per_request = meter.stop(requests=1000)
        after = sum(_cpu._cpu_seconds(pid) for pid in tree)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # µs per request = the tree's CPU seconds in between * 1e6 / 1000 requests (clock ticks: ±0.05 s).
    assert 1500 - 50 <= per_request["spinners"] <= (after - before) * 1000 + 50
    assert meter.busy["spinners"] == 3  # all three spun in between
    # With cores to spare, three single-core processes are the limit.
    assert meter.ceiling(per_request, cores=64) == pytest.approx(3 * 1e6 / per_request["spinners"])


def test_the_load_generator_is_the_child_reaped_during_the_cell():
    meter = _cpu.CpuMeter({})
    meter.start()
    _spinner(0.3).wait(timeout=30)
    per_request = meter.stop(requests=100)
    assert 2500 < per_request[_cpu.LOAD_GENERATOR] < 4000  # 0.3 s over 100 requests


def test_the_ceiling_is_all_cores_over_the_total_unless_one_process_is_the_limit_first():
    meter = _cpu.CpuMeter({})
    meter.busy = {"gateway": 2, "engine": 1}
    assert meter.ceiling({"gateway": 400, "engine": 200, "Redis": 100}, cores=2) == pytest.approx(2e6 / 700)
    # An engine costing more than the others together: its one core is the limit.
    assert meter.ceiling({"gateway": 100, "engine": 500}, cores=2) == pytest.approx(1e6 / 500)


def test_a_process_gone_before_the_end_counts_nothing_rather_than_less_than_nothing():
    proc = _spinner(0.2)
    meter = _cpu.CpuMeter({"gone": [proc.pid]})
    meter.start()
    proc.wait(timeout=30)
    assert meter.stop(requests=10)["gone"] == 0


def test_no_requests_gives_no_figures():
    meter = _cpu.CpuMeter({})
    meter.start()
    assert meter.stop(requests=0) == {}
