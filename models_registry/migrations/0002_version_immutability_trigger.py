"""A database guard: once a version leaves draft only its status may move, and only forward.

ModelVersion.save() refuses the same changes; this trigger also catches queryset.update(),
raw SQL and any shell session, so nothing silently mutates what fleets are running.
"""
from django.db import migrations

FROZEN = ("model_id", "version", "artifact_uri", "checksum", "quantization", "dtype", "max_context",
          "engine_args", "created_at", "published_at")
MESSAGE = "model versions are immutable once published: create a new version"
# Going back is illegal: to draft from anywhere, to published from deprecated, out of retired.
BACKWARDS = ("NEW.status = 'draft' OR (OLD.status = 'deprecated' AND NEW.status = 'published') "
             "OR (OLD.status = 'retired' AND NEW.status <> 'retired')")


def _changed(distinct: str) -> str:
    return " OR ".join(f"NEW.{name} {distinct} OLD.{name}" for name in FROZEN)


POSTGRES_SQL = f"""
CREATE OR REPLACE FUNCTION models_registry_version_guard() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.status <> 'draft' THEN
            RAISE EXCEPTION 'only draft model versions can be deleted (retire it instead)';
        END IF;
        RETURN OLD;
    END IF;
    IF OLD.status <> 'draft' AND ({_changed("IS DISTINCT FROM")} OR {BACKWARDS}) THEN
        RAISE EXCEPTION '{MESSAGE}';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER models_registry_version_guard
    BEFORE UPDATE OR DELETE ON models_registry_modelversion
    FOR EACH ROW EXECUTE FUNCTION models_registry_version_guard();
"""
POSTGRES_DROP = """
DROP TRIGGER IF EXISTS models_registry_version_guard ON models_registry_modelversion;
DROP FUNCTION IF EXISTS models_registry_version_guard();
"""

SQLITE_SQL = [
    f"""CREATE TRIGGER models_registry_version_guard_update BEFORE UPDATE ON models_registry_modelversion
    FOR EACH ROW WHEN OLD.status <> 'draft' AND ({_changed("IS NOT")} OR {BACKWARDS})
    BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END;""",
    """CREATE TRIGGER models_registry_version_guard_delete BEFORE DELETE ON models_registry_modelversion
    FOR EACH ROW WHEN OLD.status <> 'draft'
    BEGIN SELECT RAISE(ABORT, 'only draft model versions can be deleted (retire it instead)'); END;""",
]
SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS models_registry_version_guard_update;",
    "DROP TRIGGER IF EXISTS models_registry_version_guard_delete;",
]


def add_guard(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for statement in {"postgresql": [POSTGRES_SQL], "sqlite": SQLITE_SQL}.get(vendor, []):
        schema_editor.execute(statement)


def drop_guard(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for statement in {"postgresql": [POSTGRES_DROP], "sqlite": SQLITE_DROP}.get(vendor, []):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("models_registry", "0001_initial")]

    operations = [migrations.RunPython(add_guard, drop_guard)]
