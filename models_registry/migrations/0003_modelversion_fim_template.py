"""A version's own fill-in-the-middle template, frozen with the rest once the version leaves draft.

Adds the field, then reinstalls 0002's database guard with `fim_template` among the frozen
columns (the same statements, with the longer column list).
"""
import importlib

from django.db import migrations, models

guard = importlib.import_module("models_registry.migrations.0002_version_immutability_trigger")
FROZEN = (*guard.FROZEN, "fim_template")


def _changed(distinct: str) -> str:
    return " OR ".join(f"NEW.{name} {distinct} OLD.{name}" for name in FROZEN)


def _statements(vendor: str) -> list[str]:
    if vendor == "postgresql":
        return [guard.POSTGRES_SQL.replace(guard._changed("IS DISTINCT FROM"), _changed("IS DISTINCT FROM"))]
    if vendor == "sqlite":
        return [guard.SQLITE_SQL[0].replace(guard._changed("IS NOT"), _changed("IS NOT")), *guard.SQLITE_SQL[1:]]
    return []


def freeze_fim_template(apps, schema_editor):
    guard.drop_guard(apps, schema_editor)
    for statement in _statements(schema_editor.connection.vendor):
        schema_editor.execute(statement)


def unfreeze_fim_template(apps, schema_editor):
    guard.drop_guard(apps, schema_editor)
    guard.add_guard(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("models_registry", "0002_version_immutability_trigger")]

    operations = [
        migrations.AddField(
            model_name="modelversion",
            name="fim_template",
            field=models.CharField(
                blank=True, default="", max_length=500,
                help_text="Fill-in-the-middle template with {prefix} and {suffix}; blank: the family's (docs/fim.md)."),
        ),
        migrations.RunPython(freeze_fim_template, unfreeze_fim_template),
    ]
