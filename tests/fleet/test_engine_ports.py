"""Local engines' ports come from SWITCHYARD_ENGINE_PORTS, below the kernel's ephemeral range: a port picked
there cannot be handed to an outgoing connection or a bind(0) before the engine binds it."""
from __future__ import annotations

import socket

import pytest

from controlplane.env import ImproperSetting, env_port_range
from fleet.runtime import processes

LINUX_EPHEMERAL_LOW = 32768  # net.ipv4.ip_local_port_range's default low end


def test_the_default_range_lies_below_linux_default_ephemeral_range(settings):
    low, high = settings.SWITCHYARD_ENGINE_PORTS
    assert (low, high) == (22000, 32767) and high < LINUX_EPHEMERAL_LOW


def test_a_picked_port_is_in_the_range_free_and_not_taken(settings):
    settings.SWITCHYARD_ENGINE_PORTS = (22000, 22015)
    taken = {22000 + n for n in range(0, 16, 2)}
    picked = {processes.free_port(taken=taken) for _ in range(40)}
    assert picked and picked <= set(range(22001, 22016, 2))


def listening_socket_in(low: int, high: int) -> socket.socket:
    for port in range(low, high):
        listener = socket.socket()
        try:
            listener.bind(("127.0.0.1", port))
        except OSError:
            listener.close()
            continue
        listener.listen()
        return listener
    raise AssertionError(f"no free port in {low}-{high} to listen on")


def test_a_port_someone_listens_on_is_skipped_and_a_range_without_a_free_port_is_an_error(settings):
    with listening_socket_in(22000, 22999) as listener:
        busy = listener.getsockname()[1]
        settings.SWITCHYARD_ENGINE_PORTS = (busy, busy)
        with pytest.raises(OSError, match="no free TCP port in SWITCHYARD_ENGINE_PORTS"):
            processes.free_port()
        settings.SWITCHYARD_ENGINE_PORTS = (busy, busy + 60)
        assert all(processes.free_port() != busy for _ in range(30))


@pytest.mark.parametrize("value", ["22000", "22000-", "32767-22000", "80-90", "22000-70000", "a-b", "1024-65536"])
def test_a_bad_range_is_refused_naming_the_setting(monkeypatch, value):
    monkeypatch.setenv("SWITCHYARD_ENGINE_PORTS", value)
    with pytest.raises(ImproperSetting, match="SWITCHYARD_ENGINE_PORTS"):
        env_port_range("SWITCHYARD_ENGINE_PORTS", "22000-32767")


def test_a_good_range_is_read(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_ENGINE_PORTS", " 40000 - 40010 ")
    assert env_port_range("SWITCHYARD_ENGINE_PORTS", "22000-32767") == (40000, 40010)
