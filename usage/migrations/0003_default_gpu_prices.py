"""Seed example GPU prices (USD per hour, on-demand list prices of 2025, rounded). Edit them via the API."""
from datetime import datetime, timezone
from decimal import Decimal

from django.db import migrations

EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
DEFAULT_PRICES = [
    ("A10G", "gpu", "1.0000"),
    ("L4", "gpu", "0.8000"),
    ("A100-40G", "gpu", "1.8000"),
    ("A100-80G", "gpu", "2.5000"),
    ("H100", "gpu", "4.0000"),
    ("H200", "gpu", "5.0000"),
    ("cpu", "cpu_core", "0.0400"),
]


def seed(apps, schema_editor):
    GpuPrice = apps.get_model("usage", "GpuPrice")
    for gpu_type, unit, price in DEFAULT_PRICES:
        GpuPrice.objects.get_or_create(gpu_type=gpu_type, effective_from=EPOCH,
                                       defaults={"unit": unit, "hourly_usd": Decimal(price), "note": "example default"})


def unseed(apps, schema_editor):
    apps.get_model("usage", "GpuPrice").objects.filter(effective_from=EPOCH, note="example default").delete()


class Migration(migrations.Migration):
    dependencies = [("usage", "0002_rollups_cost_feedback_budgets")]
    operations = [migrations.RunPython(seed, unseed)]
