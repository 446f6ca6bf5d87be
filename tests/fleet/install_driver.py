"""An admin of one install, driven over stdin/stdout by tests/fleet/test_two_installs.py.

Run as `python -m tests.fleet.install_driver` in the install's environment (its own database): each
input line is a JSON command, each output line the JSON answer. Writes go through fleet.services,
as the API's do; the install's own Celery worker converges on them.
"""
import json
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django  # noqa: E402

django.setup()

from audit.actor import Actor  # noqa: E402
from fleet import services  # noqa: E402
from fleet.install import engine_owner  # noqa: E402
from fleet.models import Deployment, Instance  # noqa: E402
from fleet.states import LIVE_STATES  # noqa: E402
from models_registry.models import Model, ModelVersion  # noqa: E402

ADMIN = Actor.system("two-installs-test")
FAST = {"prefill_ms_per_token": 0.01, "decode_ms_per_token": 1.0}


def init() -> dict:
    model, _ = Model.objects.get_or_create(name="tiny-coder")
    ModelVersion.objects.get_or_create(model=model, version="v1",
                                       defaults={"artifact_uri": "fleet-tiny-coder", "status": "published"})
    owner = engine_owner()
    return {"namespace": owner.namespace, "token": owner.token}


def deploy(name: str, replicas: int) -> dict:
    version = ModelVersion.objects.get(model__name="tiny-coder", version="v1")
    services.create_deployment(tenant=None, name=name, model_version=version, actor=ADMIN, runtime_backend="simulator",
                               min_replicas=replicas, max_replicas=max(replicas, 3), simulator_params=FAST)
    return {}


def scale(name: str, replicas: int) -> dict:
    services.scale_deployment(Deployment.objects.get(name=name), min_replicas=replicas, actor=ADMIN)
    return {}


def restart(name: str) -> dict:
    instance = (Instance.objects.filter(deployment__name=name, state="ready").order_by("pk").first())
    if instance is not None:
        services.restart_instance(instance, actor=ADMIN)
    return {"restarted": getattr(instance, "pk", None)}


def delete(name: str) -> dict:
    services.delete_deployment(Deployment.objects.get(name=name), actor=ADMIN)
    return {}


def snapshot() -> dict:
    rows = Instance.objects.select_related("deployment").order_by("pk")
    return {"deployments": {d.name: {"status": d.status, "target": d.target_replicas}
                            for d in Deployment.objects.all()},
            "instances": [{"id": i.pk, "deployment": i.deployment.name, "state": i.state,
                           "pid": (i.runtime_handle or {}).get("pid"), "failure": i.failure_reason,
                           "live": i.state in LIVE_STATES} for i in rows]}


COMMANDS = {"init": init, "deploy": deploy, "scale": scale, "restart": restart, "delete": delete,
            "snapshot": snapshot}


def main() -> None:
    for line in sys.stdin:
        command = json.loads(line)
        try:
            answer = {"ok": True, **COMMANDS[command.pop("do")](**command)}
        except Exception as exc:  # the test prints it with the command that caused it
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
