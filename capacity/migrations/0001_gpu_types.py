"""GPU types for the capacity planner, seeded with common data-centre GPUs (memory as nvidia-smi reports it).

Prices stay in usage.GpuPrice (usage migration 0003 seeded example prices for A10G, L4, A100-40G,
A100-80G, H100, H200); L40S had none, so an example price is added here the same way. Edit both.
"""
from datetime import datetime, timezone
from decimal import Decimal

import django.core.validators
import django.db.models.functions.text
from django.db import migrations, models

EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
EXAMPLE = "example default"
GPU_TYPES = [  # name, total MiB
    ("L4", 23034),
    ("A10G", 23028),
    ("L40S", 46068),
    ("A100-40G", 40960),
    ("A100-80G", 81920),
    ("H100", 81559),
    ("H200", 143771),
]
L40S_EXAMPLE_PRICE = Decimal("1.9000")  # on-demand list price of 2025, rounded, as migration usage 0003's


def seed(apps, schema_editor):
    GpuType = apps.get_model("capacity", "GpuType")
    for name, mib in GPU_TYPES:
        GpuType.objects.get_or_create(name=name, defaults={"memory_mib": mib, "note": EXAMPLE})
    GpuPrice = apps.get_model("usage", "GpuPrice")
    if not GpuPrice.objects.filter(gpu_type__iexact="L40S").exists():
        GpuPrice.objects.create(gpu_type="L40S", unit="gpu", hourly_usd=L40S_EXAMPLE_PRICE, effective_from=EPOCH,
                                note=EXAMPLE)


def unseed(apps, schema_editor):
    apps.get_model("capacity", "GpuType").objects.filter(note=EXAMPLE).delete()
    apps.get_model("usage", "GpuPrice").objects.filter(gpu_type="L40S", effective_from=EPOCH, note=EXAMPLE).delete()


class Migration(migrations.Migration):

    initial = True

    dependencies = [("usage", "0003_default_gpu_prices")]

    operations = [
        migrations.CreateModel(
            name='GpuType',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(help_text='As deployments and the GPU price table name it, e.g. H100 (any case).', max_length=64, validators=[django.core.validators.RegexValidator('^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$', "Letters, digits, '.', '_' and '-', starting with a letter or digit.")])),
                ('memory_mib', models.PositiveIntegerField(help_text='Total device memory in MiB, as nvidia-smi reports it.', validators=[django.core.validators.MinValueValidator(1024), django.core.validators.MaxValueValidator(16777216)])),
                ('note', models.CharField(blank=True, default='', max_length=200)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'ordering': [django.db.models.functions.text.Lower('name')],
                'constraints': [models.UniqueConstraint(django.db.models.functions.text.Lower('name'), name='one_gpu_type_per_name')],
            },
        ),
        migrations.RunPython(seed, unseed),
    ]
