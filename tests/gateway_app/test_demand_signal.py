"""The gateways' demand signal, end to end on real Redis: streamed requests the real gateway holds at a
(simulated) engine, queued there without a first token, reach the autoscaler at once, the gateway asks
for a decision at the surge level, and the autoscaler scales up on it before any beat pass; several
gateway processes add up, a dead one drops out."""
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
from gateway.metering.recorder import RequestRecord
from tests.gateway_app.conftest import MODEL, client_for, wait_for
from tests.gateway_app.helpers import add_deployment, make_model_version

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(not settings.SWITCHYARD_GATEWAY_REDIS_URL, reason="needs the gateways' Redis")]
HELD = 6


def test_requests_held_by_the_gateway_reach_the_autoscaler_which_scales_up_on_the_gateways_ask(
        gateway, alice, simulators):
    # One sequence at a time, 0.3 s a token: of 6 requests of 10 tokens, 5 wait for seconds without a first token
    engine = simulators("--max-num-seqs", "1", "--decode-ms-per-token", "300", "--prefill-ms-per-token", "0",
                        "--eos-probability", "0")
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
    assert _redis().get(level_key) == b"4"  # 2 × 2 waiting per instance × 1 serving

    client = client_for(server, alice.key.raw)
    answers: list[str] = []
    calls = [threading.Thread(target=lambda: answers.append("".join(
        chunk.choices[0].text for chunk in client.completions.create(model=MODEL, prompt="hold", max_tokens=10,
                                                                       stream=True))))
        for _ in range(HELD)]
    for call in calls:
        call.start()
    def queued() -> bool:  # all but the one the engine runs wait for their first token
        found = demand_signal.read(deployment.pk)
        return found is not None and found[0] >= HELD - 1 and found[1] == found[0] - 1

    assert wait_for(queued, timeout=30), f"the autoscaler read {demand_signal.read(deployment.pk)} (in flight, waiting)"
    decided = wait_for(lambda: ScalingDecision.objects.filter(deployment=deployment).first(), timeout=30)
    assert decided is not None, f"no decision after {len(asks)} asks"
    # 4 or 5 waiting at the looks: ceil(waiting / 2) wanted, at most 2 more at once
    assert (decided.rule, decided.from_serving) == ("surge", 1) and decided.to_serving in (2, 3)
    assert decided.signals["gateway_waiting"] >= 4 and set(asks) == {deployment.pk}
    assert wait_for(lambda: _redis().get(level_key) is None, timeout=10)  # cooling down: the gateways stop asking
    for call in calls:
        call.join(timeout=60)
    assert len(answers) == HELD and all(answers)  # every request held was served
    assert wait_for(lambda: demand_signal.read(deployment.pk) == (0, 0), timeout=10)


def test_gateway_processes_add_up_a_stale_one_drops_out_and_asks_are_rate_limited(monkeypatch):
    monkeypatch.setattr("gateway.metering.demand.NUDGE_MS", 60_000)  # one ask a minute: the scenario's speed is moot
    prefix = redis_keys.part_prefix(f"test-{time.monotonic_ns()}", redis_keys.DEMAND)
    held_key, level_key, lock_key = redis_keys.demand_names(prefix, 7)
    streams = [RequestRecord(f"r{i}", "completions", streamed=True) for i in range(5)]
    whole = RequestRecord("w", "completions")  # answered whole: in flight, never counted as waiting

    async def scenario() -> tuple[list[int], int]:
        redis = PipelinedRedis.from_url(settings.SWITCHYARD_GATEWAY_REDIS_URL)
        asked: list[int] = []
        one, two = DemandSignal(redis, send=asked.append), DemandSignal(redis, send=asked.append)
        for signal in (one, two):
            signal.prefix = prefix
        await redis.execute("SET", level_key, "4")
        await redis.execute("HSET", held_key, "a-gateway-that-died", f"50:50:{int(time.time() * 1000) - 60_000}")
        for record in (*streams[:2], whole):
            one.enter(7, record)
        two.enter(7, streams[2])
        await one.publish()  # 2 waiting (the dead gateway's 50 are stale): under the level
        await two.publish()  # 3
        two.enter(7, streams[3])
        await two.publish()  # 4: at the level → asks
        one.enter(7, streams[4])
        await one.publish()  # 5, but an ask went out under 0.5 s ago
        streams[0].mark_first_byte()  # its first token: still in flight, no longer waiting
        await one.publish()
        await asyncio.sleep(0.05)  # the asks run in executor threads
        fields = await redis.execute("HLEN", held_key)
        for record in (*streams[:2], streams[4], whole):
            one.leave(7, record)
        for record in streams[2:4]:
            two.leave(7, record)
        await one.publish()
        await two.publish()
        await redis.aclose()
        return asked, fields

    asked, fields = asyncio.run(scenario())
    assert asked == [7] and fields == 3  # one ask; the dead gateway's field still there …
    client = _redis()
    assert client.eval(demand_signal.READ, 1, held_key, demand_signal.FRESH_MS) == [0, 0]
    assert client.hlen(held_key) == 2  # … until a read drops it; both live gateways published 0
    client.delete(held_key, level_key, lock_key)


def test_the_figures_count_streams_without_a_first_token_as_waiting():
    signal = DemandSignal(None)
    streamed, whole = RequestRecord("s", "completions", streamed=True), RequestRecord("w", "chat")
    signal.enter(3, streamed)
    signal.enter(3, whole)
    assert signal.figures(3) == (2, 1)
    streamed.mark_first_byte()
    assert signal.figures(3) == (2, 0)
    signal.leave(3, streamed)
    signal.leave(3, whole)
    assert signal.figures(3) == (0, 0) and signal.due(0.0) == [(3, 0, 0)]


def _redis():
    return demand_signal._client()
