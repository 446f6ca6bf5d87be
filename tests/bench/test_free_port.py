"""The test harness's port picks: a worker's ports come from its own range, and one process never hands out a port
twice before its user binds it (bench/_run_stack.py picks three at once)."""
from bench import _procs


def test_picks_in_one_process_are_distinct_and_in_the_workers_range(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    ports = [_procs.free_port() for _ in range(200)]  # none is bound in between: each looks free
    assert len(set(ports)) == len(ports)
    assert all(14000 <= port < 16000 for port in ports)
