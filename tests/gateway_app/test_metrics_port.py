"""`python -m gateway`'s metrics listener: this host only by default, and a port another program holds stops
the start with its number (two installs on one host never share a metrics port). Real CLI processes."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from bench._procs import REPO_ROOT, free_port, stop
from bench._run_stack import embedded_env


@pytest.fixture
def env(tmp_path) -> dict:
    """An embedded install of its own, nothing inherited that sets the metrics listener."""
    return {**embedded_env(tmp_path), "DJANGO_SETTINGS_MODULE": "controlplane.settings"}


def gateway(env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gateway", "--port", str(free_port()), *args], cwd=REPO_ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def listening_address(port: int) -> str:
    """The local address of the socket listening on `port` (from /proc/net/tcp: hex, little-endian)."""
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":  # LISTEN
            return socket.inet_ntoa(bytes.fromhex(address)[::-1])
    raise AssertionError(f"nothing listens on {port}")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_by_default_metrics_listen_on_loopback_only(env, workers):
    proc = gateway(env, "--workers", workers, "--metrics-port", "0")
    try:
        line = proc.stderr.readline()
        assert line.startswith("gateway metrics on http://127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        assert listening_address(port) == "127.0.0.1"
    finally:
        stop(proc)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_metrics_port_in_use_stops_the_start_naming_it(env, workers):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = gateway(env, "--workers", workers, "--metrics-port", str(port))
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            stop(proc)
    assert proc.returncode != 0
    assert f"cannot listen for /metrics on 127.0.0.1:{port}" in err and "SWITCHYARD_GATEWAY_METRICS_PORT" in err


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_inherited_multiprocess_directory_is_never_used(env, tmp_path, workers):
    """A PROMETHEUS_MULTIPROC_DIR from the environment (another program's) gets none of our files; with
    `--workers` the supervisor's own directory gets them, and goes when the gateway stops."""
    foreign, tmp = tmp_path / "foreign-metrics", tmp_path / "tmp"
    foreign.mkdir()
    tmp.mkdir()
    proc = gateway({**env, "PROMETHEUS_MULTIPROC_DIR": str(foreign), "TMPDIR": str(tmp)},
                   "--workers", workers, "--metrics-port", "0")
    try:
        assert proc.stderr.readline().startswith("gateway metrics on")  # single: after its metrics exist
        if workers == "2":
            (own,) = tmp.glob("switchyard-gateway-metrics-*")
            assert wait_for(lambda: len(list(own.glob("counter_*.db"))) == 2, 60), "the workers wrote no files"
    finally:
        stop(proc, grace=30)
    assert os.listdir(foreign) == []
    assert list(tmp.glob("switchyard-gateway-metrics-*")) == []


def wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False
