"""Run in a child process against a throwaway database: migrate, write the rows an outage test needs,
print them as JSON (`python -m tests.gateway_app.outage_rows --model M --url ENGINE_URL`).

bench/_fixture.py's tenant, key, deployment and ready instances, plus a second inference key of the
same tenant that the test never uses before the outage (so no gateway has it cached).
"""
from __future__ import annotations

import argparse
import json
import os


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.gateway_app.outage_rows")
    parser.add_argument("--model", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--key-rpm", type=int, help="the key's requests per minute (default: far above any test)")
    parser.add_argument("--monthly-tokens", type=int, help="a monthly token budget on the tenant")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from apikeys.scopes import Scope
    from apikeys.services import create_api_key
    from audit.actor import Actor
    from bench._fixture import create_rows
    from quotas.models import QuotaPolicy
    from quotas.services import update_quota_policy
    from tenants.models import Tenant

    call_command("migrate", verbosity=0, interactive=False)
    rows = create_rows(args.model, [args.url], None, args.key_rpm)
    tenant = Tenant.objects.get(slug="bench")
    if args.monthly_tokens:
        update_quota_policy(QuotaPolicy.objects.get(tenant=tenant, api_key=None, user=None),
                            monthly_token_budget=args.monthly_tokens, actor=Actor.system("tests"))
    cold = create_api_key(tenant=tenant, name="cold", scopes=[Scope.INFERENCE], actor=Actor.system("tests"))
    print(json.dumps({**rows, "cold_key": cold.raw}))


if __name__ == "__main__":
    main()
