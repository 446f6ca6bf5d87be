"""`make run` without REDIS_URL: a private redis-server for the gateway, stopped with the rest; and with
no redis-server at all, a gateway that refuses inference with a 503 that says why.

The stacks are bench/_run_stack.py's (an embedded install in a var/ of its own, the simulator as its
engine, nothing inherited that could point it at another Redis).
"""
import re
import shutil
import signal
import sys

import httpx
import pytest

from bench._run_stack import Stack, Way
from fleet.runtime import sockets

pytestmark = [pytest.mark.slow]
SIGTERM = Way(signal.SIGTERM)


def demo_key(output: str) -> str:
    return re.search(r"API key \(shown once\): (\S+)", output).group(1)


def gateway_url(output: str) -> str:
    return re.search(r"gateway +(http://\S+)/v1", output).group(1)


def complete(output: str) -> httpx.Response:
    return httpx.post(gateway_url(output) + "/v1/completions", timeout=30,
                      headers={"authorization": f"Bearer {demo_key(output)}"},
                      json={"model": "tiny-coder", "prompt": "def f():", "max_tokens": 4})


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_make_run_starts_a_private_redis_for_the_gateway_and_stops_it(tmp_path):
    with Stack(tmp_path, SIGTERM) as stack:
        stack.wait_for("engine ready")
        output = stack.output()
        port = int(re.search(r"redis +private redis-server on 127\.0\.0\.1:(\d+)", output).group(1))
        assert "redis-server" in " ".join(stack_commands(tmp_path))
        health = httpx.get(gateway_url(output) + "/healthz", timeout=10).json()
        assert health["redis"] == {"configured": True, "scoped": True, "problem": None}
        answered = complete(output)
        assert answered.status_code == 200, answered.text
        assert "x-ratelimit-limit-requests" in answered.headers  # counted in that Redis
        assert (tmp_path / "redis" / "redis.conf").stat().st_mode & 0o077 == 0  # its password: ours only
        stopped = stack.stop()
    assert stopped.code == 0 and stopped.left == {} and stopped.busy_ports == [], stopped.output[-3000:]
    assert not sockets.port_in_use(port)


def test_without_any_redis_make_run_says_so_and_the_gateway_refuses_inference(tmp_path):
    no_redis_path = tmp_path / "bin"  # a PATH without redis-server (the children run sys.executable)
    no_redis_path.mkdir()
    (no_redis_path / "python3").symlink_to(sys.executable)
    with Stack(tmp_path, SIGTERM, extra_env={"PATH": str(no_redis_path)}) as stack:
        stack.wait_for("engine ready")
        output = stack.output()
        assert "redis        NONE: redis-server is not installed" in output
        health = httpx.get(gateway_url(output) + "/healthz", timeout=10)
        assert health.status_code == 503 and health.json()["redis"]["configured"] is False
        refused = complete(output)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "redis_not_configured"
        stopped = stack.stop()
    assert stopped.code == 0 and stopped.left == {}, stopped.output[-3000:]


def stack_commands(var_dir) -> list[str]:
    from bench._run_stack import stack_processes

    return list(stack_processes(var_dir).values())
