"""Two installs on one host, default settings, run side by side and never touch each other's engines.

Each install has its own var/ (so its own embedded SQLite database) and its own Celery worker with
beat; they share the host, one engine log directory and — when REDIS_URL is set — one Redis database
as their broker. Instance ids start at 1 in both, so every id collides.
For SWITCHYARD_TEST_TWO_INSTALLS_SECONDS (default 40; the issue's run is 600) both are churned
with deploys, scaling, restarts and deletes through their services; all along, every engine an
install's rows point at must carry that install's namespace and token, and no instance may fail
(a simulator only fails here if the other install stopped it). Then one install is stopped the way
`make run`'s Ctrl-C stops it; the other's engines must keep running and serving.
"""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from fleet.runtime import processes
from tests.fleet.fleet_helpers import wait_until

pytestmark = [pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
SECONDS = float(os.environ.get("SWITCHYARD_TEST_TWO_INSTALLS_SECONDS", "40"))
FAST = {"SWITCHYARD_FLEET_BACKOFF_BASE_SECONDS": "1", "SWITCHYARD_FLEET_STOP_GRACE_SECONDS": "3",
        "SWITCHYARD_FLEET_DRAIN_DEADLINE_SECONDS": "3", "SWITCHYARD_FLEET_PROBE_TIMEOUT_SECONDS": "1"}


class Install:
    """One install: its database, its worker (+ beat) and a driver process that plays its admin."""

    def __init__(self, name: str, tmp: Path):
        self.name = name
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("SWITCHYARD_", "DATABASE_URL", "CELERY_", "DJANGO_SETTINGS"))}
        self.env = {**base, **FAST, "SWITCHYARD_VAR_DIR": str(tmp / f"{name}-var"),
                    "SWITCHYARD_ENGINE_LOG_DIR": str(tmp / "engine-logs"), "PYTHONUNBUFFERED": "1"}
        self.log = open(tmp / f"{name}-worker.log", "wb")
        self.log_dir = tmp / "engine-logs"
        subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=REPO, env=self.env, check=True)
        self.worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "controlplane", "worker", "-B",
                                        "--concurrency", "2", "-l", "INFO"], cwd=REPO, env=self.env,
                                       stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.driver = subprocess.Popen([sys.executable, "-m", "tests.fleet.install_driver"], cwd=REPO, env=self.env,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                       start_new_session=True)
        owner = self.do("init")
        self.owner = processes.EngineOwner(owner["namespace"], owner["token"])

    def do(self, command: str, **args) -> dict:
        self.driver.stdin.write(json.dumps({"do": command, **args}) + "\n")
        self.driver.stdin.flush()
        answer = json.loads(self.driver.stdout.readline())
        assert answer.pop("ok"), f"{self.name} {command} {args}: {answer}"
        return answer

    def engines(self) -> dict[int, set[int]]:
        return {iid: {p["pid"] for p in procs} for iid, procs in processes.tagged_processes(self.owner).items()}

    def stop_like_ctrl_c(self) -> None:
        """What scripts/run.py's stop path does: the worker first, then `fleet_stop_engines`."""
        stop_group(self.worker)
        subprocess.run([sys.executable, "manage.py", "fleet_stop_engines"], cwd=REPO, env=self.env, check=True)

    def close(self) -> None:
        if self.worker.poll() is None:
            self.stop_like_ctrl_c()
        self.driver.stdin.close()
        stop_group(self.driver)
        self.log.close()


def stop_group(proc: subprocess.Popen, grace: float = 15) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


@pytest.fixture
def installs(tmp_path):
    started = []
    try:
        for name in ("first", "second"):
            started.append(Install(name, tmp_path))
        yield started
    finally:
        for install in started:
            install.close()
        for install in started:
            worker_log = (tmp_path / f"{install.name}-worker.log").read_text()[-3000:]
            print(f"--- {install.name} worker log ---\n" + worker_log)
        leaked = {pid: cmd for install in started for pid, cmd in leftovers(install).items()}
        for pid in leaked:
            os.kill(pid, signal.SIGKILL)
        assert not leaked, f"processes of the installs outlived them: {leaked}"


def leftovers(install: Install) -> dict[int, bytes]:
    """Processes still carrying the install's var/ in their environment (its worker, driver and engines)."""
    marker = f"SWITCHYARD_VAR_DIR={install.env['SWITCHYARD_VAR_DIR']}".encode() + b"\0"
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "environ").read_bytes():
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")[:100]
        except OSError:
            continue
    return found


def assert_only_own_engines(install: Install, other: Install) -> None:
    """Every engine the install's rows point at is its own, and no instance failed (nothing stopped it)."""
    snapshot = install.do("snapshot")
    failed = [i for i in snapshot["instances"] if i["state"] == "failed"]
    assert not failed, f"{install.name}: instances failed — stopped by someone else? {failed}"
    theirs = {pid for pids in other.engines().values() for pid in pids}
    for instance in snapshot["instances"]:
        if instance["state"] in ("starting", "ready") and instance["pid"]:
            assert instance["pid"] not in theirs, f"{install.name} adopted {other.name}'s engine: {instance}"
            tags = processes.environ_tags(instance["pid"])
            assert not tags or install.owner.owns(tags), f"{install.name} instance {instance} runs under {tags}"


def churn(install: Install, rng: random.Random, deployments: dict) -> None:
    """One random admin action on the install (at most two deployments of up to two replicas)."""
    action = rng.choice(["deploy", "scale", "scale", "restart", "restart", "delete"])
    names = [n for n, alive in deployments.items() if alive]
    if action == "deploy" or not names:
        name = f"d{len(deployments)}"
        if len(names) < 2:
            install.do("deploy", name=name, replicas=rng.randint(1, 2))
            deployments[name] = True
        return
    name = rng.choice(names)
    if action == "scale":
        install.do("scale", name=name, replicas=rng.randint(0, 2))
    elif action == "restart":
        install.do("restart", name=name)
    else:
        install.do("delete", name=name)
        deployments[name] = False


def ready_everywhere(install: Install, replicas: int):
    snapshot = install.do("snapshot")
    active = [n for n, d in snapshot["deployments"].items() if d["status"] == "active"]
    ready = [i for i in snapshot["instances"] if i["state"] == "ready"]
    return (len(active) >= 1 and len(ready) == replicas * len(active)
            and not [i for i in snapshot["instances"] if i["state"] in ("pending", "starting", "draining")]
            and snapshot)


def test_two_installs_side_by_side_never_adopt_or_stop_each_others_engines(installs):
    first, second = installs
    assert first.owner.namespace != second.owner.namespace  # no configuration: one id per database
    rng = random.Random(14)
    deployed = {first.name: {}, second.name: {}}
    for install in installs:  # the same ids on both sides from the first instance on
        install.do("deploy", name="d0", replicas=2)
        deployed[install.name]["d0"] = True
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline:
        for install, other in ((first, second), (second, first)):
            churn(install, rng, deployed[install.name])
            assert_only_own_engines(install, other)
        time.sleep(rng.uniform(0.5, 2.0))

    for install in installs:  # settle: every live deployment at one replica, all ready
        for name, alive in deployed[install.name].items():
            if alive:
                install.do("scale", name=name, replicas=1)
        if not any(deployed[install.name].values()):
            install.do("deploy", name="last", replicas=1)
    settled = {i.name: wait_until(lambda i=i: ready_everywhere(i, 1),
                                  lambda i=i: f"{i.name} to settle: {i.do('snapshot')}")
               for i in installs}
    for install, other in ((first, second), (second, first)):
        assert_only_own_engines(install, other)

    logs = sorted(p.relative_to(first.log_dir) for p in first.log_dir.rglob("*.log"))
    assert {p.parts[0] for p in logs} == {first.owner.namespace, second.owner.namespace}  # instance-1.log twice

    survivors = second.engines()
    assert survivors
    first.stop_like_ctrl_c()
    assert first.engines() == {}
    assert second.engines() == survivors  # same instances, same pids: nothing of the second was touched
    time.sleep(6)  # a health-check round of the second install's worker
    after = second.do("snapshot")
    assert [i for i in after["instances"] if i["state"] == "ready"] == \
        [i for i in settled[second.name]["instances"] if i["state"] == "ready"]
    for instance in (i for i in after["instances"] if i["state"] == "ready"):
        port = next(p["port"] for p in processes.tagged_processes(second.owner)[instance["id"]] if p["port"])
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
