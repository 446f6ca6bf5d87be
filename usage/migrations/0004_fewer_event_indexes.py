"""Fewer indexes on raw events: every index is paid on each insert, and raw events are insert-heavy."""
import django.db.models.deletion
from django.db import migrations, models


def drop_like_index(apps, schema_editor):
    """PostgreSQL only: Django adds a varchar_pattern_ops index to unique CharFields (for LIKE);
    nothing searches request ids by prefix."""
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexname LIKE %s",
                       ["usage_usageevent", "usage_usageevent_request_id_%_like"])
        for (name,) in cursor.fetchall():
            cursor.execute(f'DROP INDEX IF EXISTS "{name}"')


class Migration(migrations.Migration):

    dependencies = [
        ('tenants', '0001_initial'),
        ('usage', '0003_default_gpu_prices'),
    ]

    operations = [
        migrations.AlterField(
            model_name='usageevent',
            name='tenant',
            field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                    related_name='+', to='tenants.tenant'),
        ),
        migrations.RunPython(drop_like_index, migrations.RunPython.noop),
    ]
