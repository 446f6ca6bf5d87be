"""Cost rows say what their seconds count (GPU-seconds or CPU core-seconds), so GPU-hours are never
CPU core-hours. Existing rows of deployments that hold CPU cores (no GPU type, or `cpu`) are marked;
rows of deployments deleted since stay `gpu` until their hour is recomputed."""
from django.db import migrations, models

BATCH = 500


def mark_cpu_rows(apps, schema_editor):
    deployment_model = apps.get_model("fleet", "Deployment")
    cost_model = apps.get_model("usage", "CostRollup")
    cpu = [pk for pk, gpu_type in deployment_model.objects.values_list("pk", "gpu_type")
           if (gpu_type or "").strip().lower() in ("", "cpu")]
    for index in range(0, len(cpu), BATCH):
        cost_model.objects.filter(deployment_id__in=cpu[index:index + BATCH]).update(unit="cpu_core")


class Migration(migrations.Migration):

    dependencies = [
        ("usage", "0007_histograms_as_arrays"),
        ("fleet", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="costrollup",
            name="unit",
            field=models.CharField(choices=[("gpu", "per GPU-hour"), ("cpu_core", "per CPU core-hour")], default="gpu",
                                   help_text="gpu: gpu_seconds are GPU-seconds; cpu_core: CPU core-seconds.",
                                   max_length=8),
        ),
        migrations.AlterField(
            model_name="costrollup",
            name="gpu_seconds",
            field=models.DecimalField(decimal_places=6, default=0, max_digits=20,
                                      help_text="Accelerator-seconds (CPU core-seconds for CPU instances: see unit)."),
        ),
        migrations.RunPython(mark_cpu_rows, migrations.RunPython.noop),
    ]
