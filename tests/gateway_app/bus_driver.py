"""Run in a child process on a throwaway install (bench/_fleet.py's env): what the change-bus test does to
the control plane, printed as JSON lines with the moment each change was committed.

    python -m tests.gateway_app.bus_driver churn SECONDS        # 10 instance changes a second
    python -m tests.gateway_app.bus_driver revoke KEY_PREFIX    # revoke a key (committed → published)
    python -m tests.gateway_app.bus_driver add-model NAME URL   # a new deployment with one ready instance
    python -m tests.gateway_app.bus_driver silent-model NAME URL  # the same, its publish lost, then a gap
"""
import json
import os
import sys
import time


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    command, *args = argv
    {"churn": churn, "revoke": revoke, "add-model": add_model, "silent-model": silent_model}[command](*args)


def _say(**fields) -> None:
    print(json.dumps({"at": time.time(), **fields}), flush=True)


def churn(seconds: str) -> None:
    """Ten audited instance changes a second on a deployment of its own (create, then start, ready, drain…)."""
    from django.db import transaction

    from fleet.models import Deployment, Instance
    from fleet.reconcile import _create_instance
    from fleet.transitions import transition_instance
    from models_registry.models import Model, ModelVersion

    version = ModelVersion.objects.create(model=Model.objects.create(name="churn-model"), version="v1",
                                          artifact_uri="bench/churn")
    deployment = Deployment.objects.create(name="churn", model_version=version, runtime_backend="simulator",
                                           min_replicas=0, max_replicas=64)
    deadline, changes = time.monotonic() + float(seconds), 0
    while time.monotonic() < deadline:
        with transaction.atomic():
            instance = _create_instance(deployment, deployment.model_version_id, "serving")
        for state in ("starting", "ready", "draining", "stopped"):
            if time.monotonic() >= deadline:
                break
            transition_instance(instance.pk, state, endpoint_url="http://127.0.0.1:9") if state == "starting" \
                else transition_instance(instance.pk, state)
            changes += 1
            time.sleep(0.1)
    _say(churned=changes, live=Instance.objects.filter(deployment=deployment).count())


def revoke(prefix: str) -> None:
    from apikeys.models import ApiKey
    from apikeys.services import revoke_api_key
    from audit.actor import Actor

    revoke_api_key(ApiKey.objects.get(prefix=prefix), actor=Actor.system("bus-test"))
    _say(revoked=prefix)


def add_model(name: str, url: str) -> None:
    from django.db import transaction
    from django.utils import timezone

    from audit.actor import Actor
    from audit.services import record_event
    from fleet.models import Deployment, Instance
    from models_registry.models import Model, ModelVersion
    from tenants.models import Tenant

    tenant = Tenant.objects.get(slug="bench")
    version = ModelVersion.objects.create(model=Model.objects.create(name=name), version="v1",
                                          artifact_uri=f"bench/{name}")
    with transaction.atomic():
        deployment = Deployment.objects.create(tenant=tenant, name=name, model_version=version,
                                               runtime_backend="simulator")
        record_event(actor=Actor.system("bus-test"), action="fleet.deployment.create", tenant=tenant,
                     target=deployment)
        Instance.objects.create(deployment=deployment, state="ready", endpoint_url=url, ready_at=timezone.now())
    _say(added=name)


def silent_model(name: str, url: str) -> None:
    """A change whose message is lost (published to nobody), then the next numbered message: a gap."""
    import redis
    from django.conf import settings

    from controlplane import change_bus
    from fleet.install import install_id

    real = settings.SWITCHYARD_GATEWAY_REDIS_URL
    settings.SWITCHYARD_GATEWAY_REDIS_URL = "redis://127.0.0.1:9/0"  # a closed port: the publish is lost
    change_bus._local.client = None
    add_model(name, url)
    settings.SWITCHYARD_GATEWAY_REDIS_URL = real
    seq_key, channel, _ = change_bus.channels(install_id())
    client = redis.Redis.from_url(real)
    seq = client.incr(seq_key, 2)  # the lost message's number is skipped
    client.publish(channel, f"{seq} " + json.dumps({"action": "auth.login"}))
    _say(gap_published=seq)


if __name__ == "__main__":
    main(sys.argv[1:])
