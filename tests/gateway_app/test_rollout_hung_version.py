"""A canary to a version whose engine hangs after its first byte on half of its requests (the simulator's
--hang-after-first-byte 0.5): the gateway's idle timeout ends each hung request with a clear error and meters
it as a timeout, which rollouts' gates count as an engine error, so the first stage rolls back by itself and
version A serves everything afterwards. Same harness as test_rollout_traffic.py (real gateway, real engines,
the rollout stepped between batches of load); the idle timeout is shortened so that a hang costs 0.5 s."""
from __future__ import annotations

import json
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleet.models import Instance
from rollouts import stepping
from rollouts.models import Rollout, RolloutState
from tests.gateway_app.conftest import MODEL, inference_key, wait_for
from tests.gateway_app.helpers import usage_rows
from tests.gateway_app.test_rollout_traffic import FAST, add_engines, fleet, metered, ramp, weights_in_gateway

pytestmark = pytest.mark.django_db(transaction=True)
IDLE = 0.5


@pytest.fixture(scope="module")
def engines(simulators):
    return {"a": simulators(*FAST), "b_hangs": simulators(*FAST, "--hang-after-first-byte", "0.5", "--seed", "3")}


def outcome(response: httpx.Response, stream: bool) -> str:
    """What the client saw: "ok", "timeout" (a 504 or a stream ended by an upstream_timeout event), or else."""
    if not stream:
        if response.status_code == 504 and response.json()["error"]["code"] == "upstream_timeout":
            return "timeout"
        return "ok" if response.status_code == 200 else f"status {response.status_code}"
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    if response.status_code != 200 or events[-1:] != ["[DONE]"]:
        return f"stream {response.status_code} {events[-1:]}"
    errors = [json.loads(e)["error"]["code"] for e in events[:-1] if '"error"' in e]
    return "ok" if not errors else "timeout" if errors == ["upstream_timeout"] else f"stream errors {errors}"


def send(server, raw_key: str, count: int) -> list[str]:
    """`count` distinct prompts, sequentially, every other one streamed; what each client saw."""
    headers = {"authorization": f"Bearer {raw_key}", "x-switchyard-cache": "no"}
    seen = []
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        for n in range(count):
            stream = n % 2 == 1
            body = {"model": MODEL, "prompt": f"def f{uuid.uuid4().hex}():", "max_tokens": 4, "stream": stream}
            seen.append(outcome(client.post("/v1/completions", json=body), stream))
    return seen


def running(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=5).text
    family = next(f for f in text_string_to_metric_families(text) if f.name == "vllm:num_requests_running")
    return family.samples[0].value


def test_a_version_hanging_after_its_first_byte_is_rolled_back_in_the_first_stage_and_a_keeps_serving(
        gateway, alice, engines):
    key = inference_key(alice.tenant).raw
    deployment, a, b = fleet(alice.tenant, engines["b_hangs"].url)
    add_engines(deployment, a, [engines["a"].url])
    add_engines(deployment, b, [engines["b_hangs"].url])
    server = gateway(idle_timeout=IDLE)
    server.wait_until_serving(key, MODEL)
    rollout = ramp(server, deployment, b, stages=[{"weight": 0.2, "bake_seconds": 900},
                                                  {"weight": 1.0, "bake_seconds": 0}],
                   gates={"min_requests": 10}, sticky_by="none")
    seen: list[str] = []
    while Rollout.objects.get(pk=rollout.pk).state == RolloutState.RAMPING and len(seen) < 400:
        seen += send(server, key, 20)
        metered(len(seen))
        stepping.step(rollout.pk)
    rollout = Rollout.objects.get(pk=rollout.pk)
    assert rollout.state == RolloutState.ROLLED_BACK, rollout.last_evaluation
    assert rollout.weight == 0.0 and "error_rate" in rollout.last_evaluation["failed"]
    b_engine = Instance.objects.get(deployment=deployment, model_version=b)
    on_b = [row for row in usage_rows() if row.instance_id == b_engine.pk]
    hung = [row for row in on_b if row.outcome == "timeout"]
    print(f"B served {len(on_b)} of {len(seen)} requests before the rollback, {len(hung)} of them hung")
    # The gates judge once B has 10 requests; at 20 % that is about 50 sent, stepped every 20.
    assert 10 <= len(on_b) <= 40 and hung
    # Every hung request ended for its client with the idle timeout's clear error; all others were answered.
    assert sorted(set(seen)) == ["ok", "timeout"] and seen.count("timeout") == len(hung)
    assert wait_for(lambda: running(engines["b_hangs"].url) == 0, timeout=10)  # no slot left held on B
    assert wait_for(lambda: weights_in_gateway(server, deployment.pk) == (), timeout=10)
    before = len(usage_rows())
    assert send(server, key, 20) == ["ok"] * 20
    assert {row.instance_id for row in metered(before + 20)[before:]}.isdisjoint({b_engine.pk})
