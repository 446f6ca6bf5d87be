"""Rollouts through a real gateway in front of real simulator engines: the weights reach the gateway over the
change bus, requests split by weight, sticky sessions stay on one version, a bad new version is rolled back by
its gates with every client request still answered, and a healthy one is promoted with no failed request.

The rollout is stepped here by calling `rollouts.stepping.step` (what the beat task runs) between batches of
load; engines are started by the test (no worker), their rows set ready as the health checks would."""
from __future__ import annotations

import uuid
from collections import Counter, defaultdict

import httpx
import pytest
from django.db import transaction
from django.utils import timezone

from audit.actor import Actor
from fleet.models import Deployment, Instance, InstanceRole
from fleet.states import InstanceState
from rollouts import services, stepping
from rollouts.models import Rollout, RolloutState
from tests.gateway_app.conftest import MODEL, inference_key, wait_for
from tests.gateway_app.helpers import make_model_version, usage_rows

pytestmark = pytest.mark.django_db(transaction=True)
ADMIN = Actor.system("rollout-e2e")
FAST = ("--decode-ms-per-token", "1", "--prefill-ms-per-token", "0.01")


@pytest.fixture(scope="module")
def engines(simulators):
    """Two engines of version A, a healthy B and a B that fails 20 % of its requests."""
    slow_prefill = ("--decode-ms-per-token", "1", "--prefill-ms-per-token", "10")
    return {"a": [simulators(*FAST) for _ in range(2)], "b_good": simulators(*FAST),
            "b_bad": simulators(*FAST, "--error-rate", "0.2", "--seed", "5"),
            "a_prefill": simulators(*slow_prefill), "b_slow": simulators(*slow_prefill, "--latency-multiplier", "3")}


@pytest.fixture
def key(alice) -> str:
    """A service key of alice's tenant: no per-person rate limit in the way of the load."""
    return inference_key(alice.tenant).raw


def fleet(tenant, b_url: str):
    """A deployment of A (two ready serving engines) and B's engine up and warm, as a rollout's start leaves them."""
    a, b = make_model_version(MODEL, status="published"), make_model_version(MODEL, status="published")
    with transaction.atomic():
        deployment = Deployment.objects.create(tenant=tenant, name=f"coder-{uuid.uuid4().hex[:6]}", model_version=a,
                                               runtime_backend="simulator", min_replicas=1, max_replicas=2)
        from audit.services import record_event

        record_event(actor=ADMIN, action="fleet.deployment.create", tenant=tenant, target=deployment)
    return deployment, a, b


def add_engines(deployment, version, urls, role=InstanceRole.SERVING):
    with transaction.atomic():
        for url in urls:
            Instance.objects.create(deployment=deployment, model_version=version, state=InstanceState.READY,
                                    role=role, endpoint_url=url, ready_at=timezone.now())
        from audit.services import record_event

        record_event(actor=ADMIN, action="fleet.instance.ready", tenant=deployment.tenant, target=deployment)


def send(server, raw_key: str, count: int, *, session: str | None = None) -> list[int]:
    """`count` distinct prompts (no de-duplication), sequentially; their status codes."""
    headers = {"authorization": f"Bearer {raw_key}", "x-switchyard-cache": "no"}
    if session:
        headers["x-switchyard-session"] = session
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        return [client.post("/v1/completions", json={"model": MODEL, "prompt": f"def f{uuid.uuid4().hex}():",
                                                     "max_tokens": 2}).status_code for _ in range(count)]


def metered(count: int) -> list:
    rows = wait_for(lambda: (lambda found: found if len(found) >= count else None)(usage_rows()), timeout=10)
    assert rows is not None, "the gateway's usage records did not arrive"
    return rows


def weights_in_gateway(server, deployment_id: int):
    pools = server.app.state.snapshot.pools.get(MODEL, ())
    return next((p.version_weights for p in pools if p.deployment_id == deployment_id), None)


def ramp(server, deployment, b, **options) -> Rollout:
    rollout = services.start_rollout(deployment, to_version=b, actor=ADMIN, **options)
    assert stepping.step(rollout.pk) == "ramping"  # B's engine is ready: the first stage goes live
    assert wait_for(lambda: weights_in_gateway(server, deployment.pk), timeout=10), "the weights never arrived"
    return Rollout.objects.get(pk=rollout.pk)


def test_weights_arrive_over_the_bus_and_split_traffic_then_a_rollback_returns_all_of_it(gateway, alice, key, engines):
    deployment, a, b = fleet(alice.tenant, engines["b_good"].url)
    add_engines(deployment, a, [e.url for e in engines["a"]])
    add_engines(deployment, b, [engines["b_good"].url])
    server = gateway(backstop_seconds=600)  # only the change bus can carry a change in this test
    server.wait_until_serving(key, MODEL)
    rollout = ramp(server, deployment, b, stages=[{"weight": 0.3, "bake_seconds": 900},
                                                  {"weight": 1.0, "bake_seconds": 0}], sticky_by="none")
    assert weights_in_gateway(server, deployment.pk) == ((b.pk, 0.3), (a.pk, 0.7))
    assert send(server, key, 200) == [200] * 200
    by_version = Counter(row.model_version_id for row in metered(200))
    assert 35 <= by_version[b.pk] <= 90 and by_version[a.pk] == 200 - by_version[b.pk]  # 30 % of 200 = 60
    services.roll_back_rollout(rollout, actor=ADMIN)
    assert wait_for(lambda: weights_in_gateway(server, deployment.pk) == (), timeout=10)
    assert send(server, key, 30) == [200] * 30  # B's engine is still up, but no longer routed
    assert {row.model_version_id for row in metered(230)[200:]} == {a.pk}


def test_a_sticky_session_stays_on_one_version(gateway, alice, key, engines):
    deployment, a, b = fleet(alice.tenant, engines["b_good"].url)
    add_engines(deployment, a, [e.url for e in engines["a"]])
    add_engines(deployment, b, [engines["b_good"].url])
    server = gateway()
    server.wait_until_serving(key, MODEL)
    ramp(server, deployment, b, stages=[{"weight": 0.5, "bake_seconds": 900}, {"weight": 1.0, "bake_seconds": 0}])
    sessions = [f"session-{n}" for n in range(16)]
    for session in sessions:
        assert send(server, key, 4, session=session) == [200] * 4
    rows = metered(64)
    versions_of = defaultdict(set)
    for session, chunk in zip(sessions, [rows[n:n + 4] for n in range(0, 64, 4)]):
        versions_of[session] = {row.model_version_id for row in chunk}
    assert all(len(found) == 1 for found in versions_of.values())
    assert set().union(*versions_of.values()) == {a.pk, b.pk}


def test_a_version_failing_a_fifth_of_its_requests_is_rolled_back_with_every_request_answered(gateway, alice, key,
                                                                                            engines):
    deployment, a, b = fleet(alice.tenant, engines["b_bad"].url)
    add_engines(deployment, a, [e.url for e in engines["a"]])
    add_engines(deployment, b, [engines["b_bad"].url])
    server = gateway()
    server.wait_until_serving(key, MODEL)
    rollout = ramp(server, deployment, b, stages=[{"weight": 0.1, "bake_seconds": 900},
                                                  {"weight": 1.0, "bake_seconds": 0}],
                   gates={"min_requests": 20}, sticky_by="none")
    statuses, sent = [], 0
    while Rollout.objects.get(pk=rollout.pk).state == RolloutState.RAMPING and sent < 2000:
        statuses += send(server, key, 25)
        sent += 25
        metered(sent)
        stepping.step(rollout.pk)
    rollout = Rollout.objects.get(pk=rollout.pk)
    assert rollout.state == RolloutState.ROLLED_BACK, rollout.last_evaluation
    b_instance = Instance.objects.get(deployment=deployment, model_version=b)
    served_by_b = sum(1 for row in usage_rows() if row.instance_id == b_instance.pk
                      or row.retried_instance_id == b_instance.pk)
    print(f"B served {served_by_b} of {sent} requests before the rollback")
    # The gate needs 20 of B's requests; at 10 % that is about 200 sent, stepped every 25.
    assert 20 <= served_by_b <= 60
    assert statuses == [200] * sent  # B's failures were retried on A before any byte went out
    assert wait_for(lambda: weights_in_gateway(server, deployment.pk) == (), timeout=10)
    before = len(usage_rows())
    assert send(server, key, 30) == [200] * 30
    assert {row.instance_id for row in metered(before + 30)[before:]}.isdisjoint({b_instance.pk})


def test_a_version_three_times_slower_to_first_token_is_rolled_back_on_the_ttft_gate(gateway, alice, key, engines):
    deployment, a, b = fleet(alice.tenant, engines["b_slow"].url)
    add_engines(deployment, a, [engines["a_prefill"].url])
    add_engines(deployment, b, [engines["b_slow"].url])
    server = gateway()
    server.wait_until_serving(key, MODEL)
    rollout = ramp(server, deployment, b, stages=[{"weight": 0.5, "bake_seconds": 900},
                                                  {"weight": 1.0, "bake_seconds": 0}],
                   gates={"min_requests": 20}, sticky_by="none")
    statuses, sent = [], 0
    while Rollout.objects.get(pk=rollout.pk).state == RolloutState.RAMPING and sent < 400:
        statuses += send(server, key, 20)
        sent += 20
        metered(sent)
        stepping.step(rollout.pk)
    rollout = Rollout.objects.get(pk=rollout.pk)
    assert rollout.state == RolloutState.ROLLED_BACK, rollout.last_evaluation
    assert rollout.last_evaluation["failed"] == ["ttft_p95_vs_old"]
    print("slow B:", rollout.last_evaluation["new"], "vs A:", rollout.last_evaluation["old"])
    assert statuses == [200] * sent


def test_a_healthy_canary_is_promoted_through_every_stage_without_a_failed_request(gateway, alice, key, engines):
    deployment, a, b = fleet(alice.tenant, engines["b_good"].url)
    add_engines(deployment, a, [e.url for e in engines["a"]])
    add_engines(deployment, b, [engines["b_good"].url])
    server = gateway()
    server.wait_until_serving(key, MODEL)
    stages = [{"weight": 0.1, "bake_seconds": 0}, {"weight": 0.5, "bake_seconds": 0},
              {"weight": 1.0, "bake_seconds": 0}]
    rollout = ramp(server, deployment, b, stages=stages, gates={"min_requests": 10}, sticky_by="none")
    statuses, sent, weights = [], 0, []
    while Rollout.objects.get(pk=rollout.pk).state == RolloutState.RAMPING and sent < 3000:
        statuses += send(server, key, 25)
        sent += 25
        metered(sent)
        weights.append(Rollout.objects.get(pk=rollout.pk).weight)
        stepping.step(rollout.pk)
    finished = Rollout.objects.get(pk=rollout.pk)
    assert finished.state == RolloutState.PROMOTED, finished.last_evaluation
    assert sorted(set(weights)) == [0.1, 0.5, 1.0]
    assert statuses == [200] * sent
    assert Deployment.objects.get(pk=deployment.pk).model_version_id == b.pk
    assert wait_for(lambda: weights_in_gateway(server, deployment.pk) == (), timeout=10)
    before = len(usage_rows())
    assert send(server, key, 20) == [200] * 20
    assert {row.model_version_id for row in metered(before + 20)[before:]} == {b.pk}
