"""The rollout benchmark's driver, in a child process on the bench's throwaway database (Django set up there).

    python -m bench._rollout_drive --gateway URL --key KEY --scenario NAME=URL [--scenario …]

For each scenario: a gated canary to a new version served by the scenario's engine, stepped every
STEP_SECONDS (the beat task's 5 s, compressed), under a steady open-loop load; then the same load
against an un-gated hard switch to that version, as long as the gated run took. Between runs the
deployment is put back on version A. Prints one JSON line with every run's figures.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
import uuid
from collections import Counter

STAGES = [{"weight": 0.1, "bake_seconds": 10}, {"weight": 0.5, "bake_seconds": 10},
          {"weight": 1.0, "bake_seconds": 5}]
GATES = {"min_requests": 20, "window_seconds": 30}
STEP_SECONDS = 1.0
TAIL_SECONDS = 5.0  # load kept up after the rollout finished: does traffic really leave B?
MAX_SECONDS = 120.0


class Load:
    """RATE requests a second, open loop, in a thread of its own; every answer's status and time kept."""

    def __init__(self, gateway: str, key: str, model: str, rate: float):
        self.gateway, self.key, self.model, self.rate = gateway, key, model, rate
        self.results: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        import httpx

        headers = {"authorization": f"Bearer {self.key}", "x-switchyard-cache": "no"}
        async with httpx.AsyncClient(base_url=self.gateway, headers=headers, timeout=30) as client:
            tasks, start, n = [], time.monotonic(), 0
            while not self.stop.is_set():
                tasks.append(asyncio.create_task(self._one(client)))
                n += 1
                await asyncio.sleep(max(0.0, start + n / self.rate - time.monotonic()))
            await asyncio.gather(*tasks)

    async def _one(self, client) -> None:
        try:
            response = await client.post("/v1/completions", json={
                "model": self.model, "prompt": f"def handler_{uuid.uuid4().hex}(request):", "max_tokens": 4})
            status = response.status_code
        except Exception:  # a dropped connection is a failed request too
            status = 0
        self.results.append((time.time(), status))

    def __enter__(self) -> "Load":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._rollout_drive")
    parser.add_argument("--gateway", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--model", default="sim-coder")
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--scenario", action="append", required=True, help="name=engine URL of its version B")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    runs = []
    for spec in args.scenario:
        name, url = spec.split("=", 1)
        gated = _gated(name, url, args)
        runs.append(gated)
        runs.append(_hard_switch(name, url, args, seconds=gated["seconds"]))
    print(json.dumps(runs))


def _deployment():
    from fleet.models import Deployment

    return Deployment.objects.select_related("tenant", "model_version").get(name="bench")


def _new_version(name: str, url: str):
    """Version B of the scenario, published, and its engine ready (as a rollout's start leaves it: warm)."""
    from django.db import transaction
    from django.utils import timezone

    from audit.services import record_event
    from fleet.models import Instance, InstanceRole
    from fleet.states import InstanceState
    from models_registry.models import ModelVersion, VersionStatus
    from rollouts.services import ROLLOUTS

    deployment = _deployment()
    a = deployment.model_version
    b = ModelVersion.objects.create(model=a.model, version=f"{name}-{uuid.uuid4().hex[:4]}",
                                    artifact_uri=a.artifact_uri, status=VersionStatus.PUBLISHED,
                                    published_at=timezone.now())
    with transaction.atomic():
        instance = Instance.objects.create(deployment=deployment, model_version=b, state=InstanceState.READY,
                                           role=InstanceRole.SERVING, endpoint_url=url, ready_at=timezone.now())
        record_event(actor=ROLLOUTS, action="fleet.instance.ready", tenant=deployment.tenant, target=deployment)
    return deployment, a, b, instance


def _gated(name: str, url: str, args) -> dict:
    from rollouts import services, stepping
    from rollouts.models import ACTIVE_STATES, Rollout

    deployment, a, b, instance = _new_version(name, url)
    rollout = services.start_rollout(deployment, to_version=b, actor=services.ROLLOUTS, stages=STAGES, gates=GATES,
                                     sticky_by="none", grace_seconds=60)
    timeline, finished_at = [], None
    with Load(args.gateway, args.key, args.model, args.rate) as load:
        started = time.time()
        stepping.step(rollout.pk)  # B is ready: the first stage goes live
        while time.time() - started < MAX_SECONDS:
            rollout = Rollout.objects.get(pk=rollout.pk)
            weight = rollout.weight if rollout.state in ACTIVE_STATES else (1.0 if rollout.state == "promoted" else 0.0)
            if not timeline or timeline[-1][1] != weight:
                timeline.append((round(time.time() - started, 1), weight))
            if rollout.state not in ACTIVE_STATES:
                finished_at = finished_at or time.time()
                if time.time() - finished_at >= TAIL_SECONDS:
                    break
            else:
                stepping.step(rollout.pk)
            time.sleep(STEP_SECONDS)
    rollout = Rollout.objects.get(pk=rollout.pk)
    result = _tally(f"{name}", "gated canary", load, deployment, a, b, instance, started)
    ramp_at = _first_ramp(rollout)
    decided = rollout.finished_at.timestamp() if rollout.finished_at else None
    result.update(outcome=rollout.state, timeline=timeline, reason=rollout.state_reason,
                  detect_s=(decided - ramp_at) if decided and ramp_at and rollout.state == "rolled_back" else None,
                  rollback_s=_last_b_after(instance, decided) if rollout.state == "rolled_back" else None)
    _reset(deployment, a)
    return result


def _first_ramp(rollout) -> float | None:
    from audit.models import AuditEvent

    event = AuditEvent.objects.filter(action="rollout.ramp", target_id=str(rollout.pk)).order_by("seq").first()
    return event.occurred_at.timestamp() if event else None


def _last_b_after(instance, decided: float | None) -> float | None:
    """Seconds from the rollback decision to the end of the last request B served (0: none after it)."""
    from usage.models import UsageEvent

    if decided is None:
        return None
    last = (UsageEvent.objects.filter(instance_id=instance.pk).order_by("-occurred_at")
            .values_list("occurred_at", flat=True).first())
    return max(0.0, last.timestamp() - decided) if last else 0.0


def _hard_switch(name: str, url: str, args, *, seconds: float) -> dict:
    """The deployment's version set to B at once, nothing watching: what upgrading was before rollouts."""
    deployment, a, b, instance = _new_version(f"{name}-hard", url)
    with Load(args.gateway, args.key, args.model, args.rate) as load:
        started = time.time()
        _set_version(deployment, b)
        time.sleep(seconds)
    result = _tally(name, "hard switch", load, deployment, a, b, instance, started)
    result.update(outcome="switched", timeline=[(0.0, 1.0)], reason="", detect_s=None, rollback_s=None)
    _reset(deployment, a)
    return result


def _set_version(deployment, version) -> None:
    from django.db import transaction

    from audit.services import record_event
    from fleet.models import Deployment
    from rollouts.services import ROLLOUTS

    with transaction.atomic():
        Deployment.objects.filter(pk=deployment.pk).update(model_version=version)
        record_event(actor=ROLLOUTS, action="fleet.deployment.update", tenant=deployment.tenant, target=deployment,
                     after={"model_version": str(version)})


def _reset(deployment, a) -> None:
    """Back on A for the next run, once the last requests are metered; the old B engine stays (unrouted)."""
    time.sleep(3)
    _set_version(deployment, a)
    time.sleep(2)


def _tally(name, mode, load, deployment, a, b, instance, started) -> dict:
    from usage.models import UsageEvent

    time.sleep(2.5)  # the gateway meters every second
    since = _aware(started)
    rows = UsageEvent.objects.filter(occurred_at__gte=since, model_version_id__in=(a.pk, b.pk))
    served = Counter(rows.values_list("model_version_id", flat=True))
    b_errors = UsageEvent.objects.filter(occurred_at__gte=since, outcome__in=("upstream_error", "timeout"),
                                         instance_id=instance.pk).count()
    b_errors += UsageEvent.objects.filter(occurred_at__gte=since, retried_instance_id=instance.pk).count()
    statuses = [status for _, status in load.results]
    ttfts = sorted(ms for ms in rows.filter(outcome="ok").values_list("ttft_ms", flat=True) if ms is not None)
    failures = Counter(str(s) if s else "no answer" for s in statuses if s != 200)
    return {"scenario": name, "mode": mode, "sent": len(statuses), "failed": sum(failures.values()),
            "failures": dict(failures), "ttft_p95_ms": ttfts[int(0.95 * (len(ttfts) - 1))] if ttfts else None,
            "served_a": served[a.pk], "served_b": served[b.pk], "b_engine_errors": b_errors,
            "seconds": round(time.time() - started - 2.5, 1)}


def _aware(epoch: float):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(epoch, tz=timezone.utc)


if __name__ == "__main__":
    main()
