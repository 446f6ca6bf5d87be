"""The gateways' demand signal, end to end on real Redis: requests the real gateway holds at a (simulated)
engine reach the autoscaler at once, the gateway asks for a decision at the surge level, and the
autoscaler scales up on it before any beat pass; several gateway processes add up, a dead one drops out."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.conf import settings
from django.db import connection

from controlplane import demand_signal, redis_keys
from fleet import services
from fleet.autoscaling import scaler
from fleet.install import install_id
from fleet.models import ScalingDecision
from fleet.transitions import FLEET
from gateway.clients.pipelined_redis import PipelinedRedis
from gateway.metering.demand import DemandSignal
from tests.gateway_app.conftest import MODEL, client_for, wait_for
from tests.gateway_app.helpers import add_deployment, make_model_version

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(not settings.SWITCHYARD_GATEWAY_REDIS_URL, reason="needs the gateways' Redis")]
HELD = 6


def test_requests_held_by_the_gateway_reach_the_autoscaler_which_scales_up_on_the_gateways_ask(
        gateway, alice, simulators):
    engine = simulators("--decode-ms-per-token", "300", "--prefill-ms-per-token", "0")  # ~9 s per request
    deployment = add_deployment(make_model_version(MODEL), tenant=None, name="surging", urls=[engine.url],
                                min_replicas=1, max_replicas=4, serving_replicas=1)
    services.set_scaling_policy(deployment, actor=FLEET, enabled=True, queue_per_instance=2, up_window_seconds=20,
                                cooldown_up_seconds=60, max_step=2)
    asks: list[int] = []

    def fleet_decides(deployment_id: int) -> None:  # what `fleet.autoscale_now` runs, the Celery transport aside
        asks.append(deployment_id)
        scaler.scale_one(deployment_id)
        connection.close()

    server = gateway(redis_scope=install_id())  # the install's own keys: the fleet reads what the gateway wrote
    server.app.state.demand._send = fleet_decides
    server.wait_until_serving(alice.key.raw, MODEL)
    assert scaler.scale_one(deployment.pk) == 0  # a beat pass: nothing held, and the gateways' level is left
    _, level_key, _ = demand_signal.names(deployment.pk)
    assert _redis().get(level_key) == b"4"  # 2 × 2 waiting per instance × 1 serving + 0 running

    client = client_for(server, alice.key.raw)
    answers: list[str] = []
    calls = [threading.Thread(target=lambda: answers.append(
        client.completions.create(model=MODEL, prompt="hold", max_tokens=30).choices[0].finish_reason))
        for _ in range(HELD)]
    for call in calls:
        call.start()
    assert wait_for(lambda: demand_signal.read_held(deployment.pk) == HELD, timeout=30), \
        f"the autoscaler read {demand_signal.read_held(deployment.pk)} held, not {HELD}"
    decided = wait_for(lambda: ScalingDecision.objects.filter(deployment=deployment).first(), timeout=30)
    assert decided is not None, f"no decision after {len(asks)} asks"
    # The first look may have caught 4 or 5 of the 6 requests: ceil(held / 2) more, at most 2 at once
    assert (decided.rule, decided.from_serving) == ("surge", 1) and decided.to_serving in (2, 3)
    assert decided.signals["held"] >= 4 and set(asks) == {deployment.pk}
    assert wait_for(lambda: _redis().get(level_key) is None, timeout=10)  # cooling down: the gateways stop asking
    for call in calls:
        call.join(timeout=60)
    assert len(answers) == HELD  # every request held was served
    assert wait_for(lambda: demand_signal.read_held(deployment.pk) == 0, timeout=10)


def test_gateway_processes_add_up_a_stale_one_drops_out_and_asks_are_rate_limited():
    prefix = redis_keys.part_prefix(f"test-{time.monotonic_ns()}", redis_keys.DEMAND)
    held_key, level_key, _ = redis_keys.demand_names(prefix, 7)

    async def scenario() -> tuple[list[int], list]:
        redis = PipelinedRedis.from_url(settings.SWITCHYARD_GATEWAY_REDIS_URL)
        asked: list[int] = []
        one, two = DemandSignal(redis, send=asked.append), DemandSignal(redis, send=asked.append)
        for signal in (one, two):
            signal.prefix = prefix
        await redis.execute("SET", level_key, "5")
        await redis.execute("HSET", held_key, "a-gateway-that-died", f"50:{int(time.time() * 1000) - 60_000}")
        for _ in range(3):
            one.enter(7)
        two.enter(7)
        await one.publish()  # 3 (the dead gateway's 50 is stale): under the level
        await two.publish()  # 4
        two.enter(7)
        await two.publish()  # 5: at the level → asks
        one.enter(7)
        await one.publish()  # 6, but an ask went out under 0.5 s ago
        await asyncio.sleep(0.05)  # the asks run in executor threads
        seen = [await redis.execute("HLEN", held_key)]
        for _ in range(4):
            one.leave(7)
        for _ in range(2):
            two.leave(7)
        await one.publish()
        await two.publish()
        await redis.aclose()
        return asked, seen

    asked, (fields_before_read,) = asyncio.run(scenario())
    assert asked == [7]
    assert fields_before_read == 3  # the dead gateway's field is still there …
    assert demand_signal._client().eval(demand_signal.READ, 1, held_key, demand_signal.FRESH_MS) == 0
    assert _redis().hlen(held_key) == 2  # … until a read drops it; both live gateways published 0
    _redis().delete(held_key, level_key, held_key.replace(":held", ":nudge-lock"))


def _redis():
    return demand_signal._client()
