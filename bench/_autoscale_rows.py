"""The autoscaling benchmark's database side, run in a child process with the bench's SWITCHYARD_VAR_DIR.

    python -m bench._autoscale_rows setup   SPEC_JSON   # migrate; tenant, key, one deployment per scenario
    python -m bench._autoscale_rows schedule NAME JSON  # set a deployment's schedule windows
    python -m bench._autoscale_rows status              # ready serving / warm instances per scenario
    python -m bench._autoscale_rows report  FROM TO     # instance-seconds, decisions, promotions (epoch seconds)
    python -m bench._autoscale_rows cleanup             # stop every engine of this bench's fleet namespace

Deployments are made by the fleet's own services (`create_deployment`, `set_scaling_policy`), so the
Celery worker's reconcile starts their simulator engines through the simulator runtime backend, and
the autoscaler sees them as it sees any deployment. Each prints one JSON line.
"""
from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from datetime import timezone as tz

# The largest values a quota policy accepts: every limit is checked, none refuses.
LIMITS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests")


def setup(spec: dict) -> dict:
    from django.core.management import call_command

    from apikeys.scopes import Scope
    from apikeys.services import create_api_key
    from audit.actor import Actor
    from fleet import services
    from models_registry.models import Model, ModelVersion
    from quotas.models import LIMIT_BOUNDS, QuotaPolicy
    from quotas.services import create_quota_policy, update_quota_policy
    from tenants.services import create_tenant

    call_command("migrate", verbosity=0, interactive=False)
    actor = Actor.system("bench")
    generous = {name: LIMIT_BOUNDS[name] for name in LIMITS}
    tenant = create_tenant(slug="bench", name="Bench", actor=actor)
    update_quota_policy(QuotaPolicy.objects.get(tenant=tenant, api_key=None, user=None), actor=actor, **generous)
    minted = create_api_key(tenant=tenant, name="bench", scopes=[Scope.INFERENCE], actor=actor)
    create_quota_policy(tenant=tenant, api_key=minted.api_key, actor=actor, **generous)
    for scenario in spec["scenarios"]:
        version = ModelVersion.objects.create(model=Model.objects.create(name=scenario["model"]), version="v1",
                                              artifact_uri=f"bench/{scenario['model']}", status="published")
        deployment = services.create_deployment(
            tenant=tenant, name=scenario["name"], model_version=version, actor=actor, runtime_backend="simulator",
            min_replicas=scenario["min"], max_replicas=scenario["max"], warm_pool_size=scenario.get("warm", 0),
            simulator_params=spec["simulator_params"])
        if scenario.get("policy"):
            services.set_scaling_policy(deployment, actor=actor, enabled=True, **scenario["policy"])
    return {"key": minted.raw}


def schedule(name: str, windows: list) -> dict:
    from audit.actor import Actor
    from fleet import services
    from fleet.models import Deployment

    policy = services.set_scaling_policy(Deployment.objects.get(name=name), actor=Actor.system("bench"),
                                         schedule=windows)
    return {"schedule": policy.schedule, "lead_seconds": policy.schedule_lead_seconds}


def status() -> dict:
    from fleet.models import Deployment

    found = {}
    for deployment in Deployment.objects.all():
        ready = deployment.instances.filter(state="ready")
        found[deployment.name] = {"serving": ready.filter(role="serving").count(),
                                  "warm": ready.filter(role="warm").count(),
                                  "serving_target": deployment.serving_target, "warm_target": deployment.warm_target}
    return found


def report(since: float, until: float) -> dict:
    from fleet.models import Deployment

    return {d.name: _deployment_report(d, since, until) for d in Deployment.objects.all()}


def _deployment_report(deployment, since: float, until: float) -> dict:
    from audit.models import AuditEvent
    from usage.models import UsageEvent

    instances = list(deployment.instances.all())
    decisions = [{"at": d.decided_at.timestamp(), "rule": d.rule, "from": d.from_serving, "to": d.to_serving}
                 for d in deployment.scaling_decisions.filter(decided_at__gte=_dt(since), decided_at__lte=_dt(until))
                 .order_by("decided_at")]
    promoted = AuditEvent.objects.filter(action="fleet.instance.promote", occurred_at__gte=_dt(since),
                                         occurred_at__lte=_dt(until), target_id__in=[str(i.pk) for i in instances])
    promotions = []
    for event in promoted.order_by("occurred_at"):
        first = (UsageEvent.objects.filter(instance_id=int(event.target_id), occurred_at__gt=event.occurred_at,
                                           status_code=200).order_by("occurred_at").first())
        instance = next(i for i in instances if i.pk == int(event.target_id))
        promotions.append({"at": event.occurred_at.timestamp(), "instance": instance.pk,
                           "was_ready": bool(instance.ready_at and instance.ready_at <= event.occurred_at),
                           "first_served": _first_token_at(first)})
    found = {"instance_seconds": sum(_alive_seconds(i, since, until) for i in instances),
             "decisions": decisions, "promotions": promotions,
             "peak_instances": max((_alive_at(instances, d["at"]) for d in decisions), default=None)}
    if os.environ.get("BENCH_AUTOSCALE_OUTCOMES"):  # every request's usage record, for a closer look
        found["usage"] = _usage_rows(deployment, since, until)
    return found


def _usage_rows(deployment, since: float, until: float) -> list[list]:
    """[started (epoch s), TTFT ms, instance id, prompt tokens, cached tokens] per request the gateway metered."""
    from usage.models import UsageEvent

    instances = [i.pk for i in deployment.instances.all()]
    rows = (UsageEvent.objects.filter(instance_id__in=instances, occurred_at__gte=_dt(since),
                                      occurred_at__lte=_dt(until))
            .order_by("occurred_at").values_list("occurred_at", "latency_ms", "ttft_ms", "instance_id",
                                                 "prompt_tokens", "cached_tokens"))
    return [[at.timestamp() - latency / 1000, ttft, instance, prompt, cached]
            for at, latency, ttft, instance, prompt, cached in rows]


def _first_token_at(event) -> float | None:
    """When the promoted instance's first request got its first token (the row records the finish)."""
    if event is None:
        return None
    return event.occurred_at.timestamp() - (event.latency_ms - (event.ttft_ms or event.latency_ms)) / 1000


def _alive_seconds(instance, since: float, until: float) -> float:
    """Seconds of [since, until] the instance's engine existed: from its launch to its stop (or failure)."""
    began = instance.starting_at or instance.ready_at
    if began is None:
        return 0.0
    ended = instance.stopped_at or instance.failed_at or instance.released_at
    start, end = max(began.timestamp(), since), min(ended.timestamp() if ended else until, until)
    return max(0.0, end - start)


def _alive_at(instances, at: float) -> int:
    return sum(1 for i in instances if 0 < _alive_seconds(i, at - 0.001, at + 0.001))


def cleanup() -> dict:
    """Stop every engine of this namespace, whichever state the rows are in (also after a failed run)."""
    from django.conf import settings

    from fleet.runtime import processes

    namespace = settings.SWITCHYARD_FLEET_NAMESPACE
    stopped = 0
    for tags, _ in processes.engine_processes():
        if tags.get(processes.NAMESPACE_VAR) == namespace:
            owner = processes.EngineOwner(namespace, tags.get(processes.TOKEN_VAR, ""))
            stopped += processes.kill_instance(owner, int(tags[processes.INSTANCE_VAR]), 2.0)
    return {"stopped": stopped}


def _dt(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=tz.utc)


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    command, *args = argv
    if command == "setup":
        print(json.dumps(setup(json.loads(args[0]))))
    elif command == "schedule":
        print(json.dumps(schedule(args[0], json.loads(args[1]))))
    elif command == "status":
        print(json.dumps(status()))
    elif command == "report":
        print(json.dumps(report(float(args[0]), float(args[1]))))
    elif command == "cleanup":
        print(json.dumps(cleanup()))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
