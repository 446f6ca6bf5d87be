"""The change bus across real processes: `python -m gateway --workers 2` on a throwaway install, the control
plane's changes made by a child process (tests/gateway_app/bus_driver.py) while 10 instance changes a
second churn. A revoked key is refused, and a new model routable, on every worker within a second of the
commit; a lost message is noticed by the gap in the numbers and repaired by a full reload; the steady
state does no periodic full reload."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from bench._fleet import Fleet, redis_problem, redis_url
from bench._procs import REPO_ROOT, Processes

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(redis_problem(redis_url()) is not None, reason="needs Redis")]
BACKSTOP_SECONDS = 60


@pytest.fixture(scope="module")
def bus_fleet():
    with Processes() as procs:
        fleet = Fleet(procs, model="bus-coder")
        try:
            engine = fleet.start_simulator("--prefill-ms-per-token", "0", "--decode-ms-per-token", "0")
            fleet.create_rows()
            env = fleet.env()
            env["SWITCHYARD_GATEWAY_BACKSTOP_SECONDS"] = str(BACKSTOP_SECONDS)  # only the bus can be this quick
            fleet.env = lambda: env
            proc, url = fleet.extra_gateway(workers=2)
            yield fleet, url, engine
        finally:
            fleet.cleanup()


def drive(fleet, *args: str, wait: bool = True):
    command = [sys.executable, "-m", "tests.gateway_app.bus_driver", *args]
    proc = subprocess.Popen(command, cwd=REPO_ROOT, env=fleet.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    if not wait:
        return proc
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def worker_clients(url: str, want: int = 2, tries: int = 60) -> dict[int, httpx.Client]:
    """One kept-alive connection per worker (a connection stays with the worker that accepted it)."""
    found: dict[int, httpx.Client] = {}
    for _ in range(tries):
        client = httpx.Client(timeout=5)
        pid = client.get(url + "/healthz").json()["worker_pid"]
        if pid in found:
            client.close()
        else:
            found[pid] = client
        if len(found) == want:
            break
    assert len(found) == want, found
    return found


def watch(clients: dict[int, httpx.Client], check, seconds: float = 10.0) -> dict[int, float]:
    """For each worker, when `check(client)` first held (epoch seconds), polling every 10 ms."""
    seen: dict[int, float] = {}
    deadline = time.monotonic() + seconds
    while len(seen) < len(clients) and time.monotonic() < deadline:
        for pid, client in clients.items():
            if pid not in seen and check(client):
                seen[pid] = time.time()
        time.sleep(0.01)
    return seen


def test_every_worker_is_on_the_bus(bus_fleet):
    _, url, _ = bus_fleet
    connected = watch(worker_clients(url), lambda c: c.get(url + "/healthz").json()["change_bus"]["connected"])
    assert len(connected) == 2


def test_revocation_and_a_new_model_reach_every_worker_within_a_second_under_churn(bus_fleet):
    fleet, url, engine = bus_fleet
    clients = worker_clients(url)
    before = {pid: c.get(url + "/healthz").json()["change_bus"]["full_reloads"] for pid, c in clients.items()}
    churn = drive(fleet, "churn", "12", wait=False)
    try:
        time.sleep(2)  # the churn is under way
        headers = {"authorization": f"Bearer {fleet.key}"}
        assert all(c.get(url + "/v1/models", headers=headers).status_code == 200 for c in clients.values())
        added = drive(fleet, "add-model", "bus-new", engine)
        appeared = watch(clients, lambda c: "bus-new" in c.get(url + "/v1/models", headers=headers).text)
        revoked = drive(fleet, "revoke", _prefix_of(fleet.key))
        refused = watch(clients, lambda c: c.get(url + "/v1/models", headers=headers).status_code == 401)
    finally:
        out, err = churn.communicate(timeout=60)
    assert churn.returncode == 0, err[-2000:]
    churned = json.loads(out.strip().splitlines()[-1])["churned"]
    assert churned >= 24, churned  # aims at ~10 changes a second; a loaded 2-core host manages fewer
    lags = {"model": {pid: at - added["at"] for pid, at in appeared.items()},
            "revocation": {pid: at - revoked["at"] for pid, at in refused.items()}}
    print(f"change-bus lag per worker (s) under {churned} changes:", json.dumps(lags))
    # The product bound is 1 s (0.15–0.2 s measured on a quiet host: docs/gateway.md). Tests do not
    # assert timings, so this asserts what only the bus can do: every worker applied both changes
    # long before the 60 s backstop poll could have found them, and by sections, not a full reload.
    for kind, per_worker in lags.items():
        assert len(per_worker) == 2 and max(per_worker.values()) < BACKSTOP_SECONDS / 6, (kind, per_worker)
    after = {pid: c.get(url + "/healthz").json()["change_bus"] for pid, c in clients.items()}
    assert all(after[pid]["full_reloads"] == before[pid] for pid in before), (before, after)  # sections only


def _prefix_of(raw_key: str) -> str:
    from apikeys import keyformat

    return keyformat.display_prefix(raw_key)


def test_a_lost_message_is_repaired_by_a_full_reload_at_the_next_one(bus_fleet):
    fleet, url, engine = bus_fleet
    clients = worker_clients(url)
    before = {pid: c.get(url + "/healthz").json()["change_bus"] for pid, c in clients.items()}
    sent = drive(fleet, "silent-model", "bus-silent", engine)
    # The new key was revoked by the test above: read what is routable through a fresh key instead.
    key = json.loads(subprocess.run(
        [sys.executable, "-c", "import django,os,json;os.environ.setdefault('DJANGO_SETTINGS_MODULE',"
         "'controlplane.settings');django.setup();from apikeys.services import create_api_key;"
         "from tenants.models import Tenant;from audit.actor import Actor;"
         "m=create_api_key(tenant=Tenant.objects.get(slug='bench'),name='gap',scopes=['inference'],"
         "actor=Actor.system('t'));print(json.dumps(m.raw))"],
        cwd=REPO_ROOT, env=fleet.env(), capture_output=True, text=True, timeout=120).stdout.strip().splitlines()[-1])
    headers = {"authorization": f"Bearer {key}"}
    appeared = watch(clients, lambda c: "bus-silent" in c.get(url + "/v1/models", headers=headers).text)
    assert len(appeared) == 2 and max(at - sent["at"] for at in appeared.values()) < 5.0, appeared
    after = {pid: c.get(url + "/healthz").json()["change_bus"] for pid, c in clients.items()}
    for pid in before:
        assert after[pid]["gaps"] > before[pid]["gaps"] and after[pid]["full_reloads"] > before[pid]["full_reloads"]
