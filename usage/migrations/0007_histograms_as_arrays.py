"""Rollup histograms as `bigint[]` on PostgreSQL (summing buckets without parsing JSON per row).

The stored JSON arrays are converted in place (`[1, 2]` → `{1, 2}`); one table rewrite, a few seconds
for a year of rollups. Elsewhere (SQLite) the column stays JSON text and nothing changes on disk.
"""
from django.db import migrations

import usage.fields

COLUMNS = ("ttft_histogram", "latency_histogram")


def _alter(schema_editor, sql: str) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for column in COLUMNS:
        schema_editor.execute(sql.format(column=column))


def to_arrays(apps, schema_editor):
    _alter(schema_editor, "ALTER TABLE usage_usagerollup ALTER COLUMN {column} TYPE bigint[] "
                          "USING translate({column}::text, '[]', '{{}}')::bigint[]")


def to_json(apps, schema_editor):
    _alter(schema_editor, "ALTER TABLE usage_usagerollup ALTER COLUMN {column} TYPE jsonb USING to_jsonb({column})")


class Migration(migrations.Migration):

    dependencies = [
        ('usage', '0006_event_indexes_with_ttft'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(to_arrays, to_json)],
            state_operations=[
                migrations.AlterField(
                    model_name='usagerollup',
                    name='ttft_histogram',
                    field=usage.fields.HistogramField(default=list, help_text='Counts per bucket of usage.histograms.BOUNDS_MS.'),
                ),
                migrations.AlterField(
                    model_name='usagerollup',
                    name='latency_histogram',
                    field=usage.fields.HistogramField(default=list),
                ),
            ],
        ),
    ]
