"""Run in a child process with a throwaway SWITCHYARD_VAR_DIR: migrate, then write the rows a gateway
benchmark needs and print them as JSON.

    python -m bench._fixture --model sim-coder --url http://127.0.0.1:9001 [--url …] [--policy NAME]

One tenant (redaction at its default, `redact`), a tenant-wide and a key-level quota policy with
limits far above what a benchmark sends (so every limit is checked, none refuses), an inference
key, a model version, a deployment dedicated to the tenant and one READY instance per URL. Rows are
written like the services write them (audited), so the gateway's snapshot picks them up.
"""
from __future__ import annotations

import argparse
import json
import os

# The largest values a policy accepts: far above what a benchmark sends, yet every one is checked.
LIMITS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests")


def main(argv=None) -> None:
    args = _parser().parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    rows = create_rows(args.model, args.url, args.policy, args.key_rpm, tenants=args.tenants)
    print(json.dumps(rows))


def create_rows(model_name: str, urls: list[str], policy: str | None, key_rpm: int | None = None,
                tenants: int = 1) -> dict:
    """With `tenants` > 1: that many tenants with a key each, on one shared deployment (`keys`)."""
    from django.db import transaction
    from django.utils import timezone

    from apikeys.scopes import Scope
    from apikeys.services import create_api_key
    from audit.actor import Actor
    from audit.services import record_event
    from fleet.models import BuiltinRuntime, Deployment, Instance
    from fleet.states import InstanceState
    from models_registry.models import Model, ModelVersion
    from quotas.models import LIMIT_BOUNDS, QuotaPolicy
    from quotas.services import create_quota_policy, update_quota_policy
    from tenants.services import create_tenant

    actor = Actor.system("bench")
    generous = {name: LIMIT_BOUNDS[name] for name in LIMITS}
    keys = []
    for number in range(tenants):
        tenant = create_tenant(slug=f"bench{number or ''}", name=f"Bench {number}", actor=actor)
        update_quota_policy(QuotaPolicy.objects.get(tenant=tenant, api_key=None, user=None), actor=actor,
                            **generous)
        minted = create_api_key(tenant=tenant, name="bench", scopes=[Scope.INFERENCE], actor=actor)
        key_limits = {**generous, "requests_per_minute": key_rpm} if key_rpm else generous
        create_quota_policy(tenant=tenant, api_key=minted.api_key, actor=actor, **key_limits)
        keys.append(minted.raw)
    if tenants > 1:
        tenant = None  # one shared pool that every tenant's key may use
    version = ModelVersion.objects.create(model=Model.objects.create(name=model_name), version="v1",
                                          artifact_uri=f"bench/{model_name}")
    spec = {"routing_policy": policy} if policy else {}
    with transaction.atomic():
        deployment = Deployment.objects.create(
            tenant=tenant, name="bench", model_version=version, runtime_backend=BuiltinRuntime.SIMULATOR,
            simulator_params={"scheduling_policy": "priority"}, **spec)
        record_event(actor=actor, action="fleet.deployment.create", tenant=tenant, target=deployment)
        for url in urls:
            Instance.objects.create(deployment=deployment, state=InstanceState.READY, endpoint_url=url,
                                    ready_at=timezone.now())
    return {"key": keys[0], "keys": keys, "model": model_name}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench._fixture")
    parser.add_argument("--model", required=True)
    parser.add_argument("--url", action="append", required=True)
    parser.add_argument("--policy")
    parser.add_argument("--key-rpm", type=int, help="the key's requests/min (tests of exact limits)")
    parser.add_argument("--tenants", type=int, default=1, help="tenants (a key each) sharing one deployment")
    return parser


if __name__ == "__main__":
    main()
