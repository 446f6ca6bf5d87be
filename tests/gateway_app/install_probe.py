"""Run in a child process on a throwaway install: what its control plane puts in Redis besides the
gateway's keys, and the ids that collide between installs, printed as JSON.

    python -m tests.gateway_app.install_probe

A counter in Django's cache (as the login throttle keeps one) and a Celery task sent to the broker
with no worker to take it (so its message stays in Redis); then the install id and the ids of the
bench tenant, its key and its model version (tests/gateway_app/outage_rows.py made them).
"""
import json
import os


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    import django

    django.setup()
    from apikeys.models import ApiKey
    from controlplane.celery import app
    from controlplane.counters import count_in_window
    from fleet.install import install_id
    from models_registry.models import ModelVersion
    from tenants.models import Tenant

    count_in_window("install-probe", 300)
    app.send_task("audit.verify_chain")
    tenant = Tenant.objects.get(slug="bench")
    print(json.dumps({"install_id": install_id(), "tenant": tenant.pk,
                      "keys": sorted(ApiKey.objects.filter(tenant=tenant).values_list("pk", flat=True)),
                      "versions": sorted(ModelVersion.objects.values_list("pk", flat=True))}))


if __name__ == "__main__":
    main()
