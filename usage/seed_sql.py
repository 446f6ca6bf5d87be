"""Server-side generation of synthetic events on PostgreSQL: one INSERT … SELECT per batch.

Generating rows inside the database avoids shipping ten million rows through Python (≈50 µs each
here). Rows are generated in time order, so the three indexes (request id, time, tenant + time) grow at
their right edge instead of splitting pages all over: measured ≈6× faster than random order.
Same distributions as `seeding._row`: Box-Muller normals feed log-normal token counts and latencies.
"""
from contextlib import contextmanager, nullcontext
from datetime import datetime

from django.db import connection, transaction

from usage.models import UsageEvent

GENERATE_SQL = """
WITH targets(idx, tenant_id, key, model_name, version_id, instance_id) AS (VALUES {targets})
INSERT INTO {table} ({columns})
SELECT 'seed-' || %(run)s || '-' || lpad(g::text, 10, '0'),
       %(start)s::timestamptz + (g + r.at) * %(step)s * interval '1 second',
       t.tenant_id, t.key, t.model_name, t.version_id,
       CASE WHEN o.outcome IN ('client_error', 'rate_limited') THEN NULL ELSE t.instance_id END,
       CASE WHEN r.u5 < 0.5 THEN 'completions' ELSE 'chat' END, o.status, o.outcome,
       o.prompt, o.completion, floor(o.prompt * r.u6 * 0.7)::int, o.ttft,
       coalesce(o.ttft, 0) + o.completion * (8 + 17 * r.u7) + 5 + 35 * r.u8, 0,
       r.u9 < 0.03, r.u9 > 0.99, r.u5 < 0.6
FROM generate_series(%(lo)s, %(hi)s) g
CROSS JOIN LATERAL (
    SELECT random() AS at, floor(power(random(), 2) * %(targets)s)::int + 1 + 0 * g AS ti, random() AS pick,
           sqrt(-2 * ln(1 - random())) AS radius, 2 * pi() * random() AS angle,
           sqrt(-2 * ln(1 - random())) AS radius2, 2 * pi() * random() AS angle2,
           random() AS u5, random() AS u6, random() AS u7, random() AS u8, random() AS u9
) r
CROSS JOIN LATERAL (
    SELECT c.outcome, c.status,
           CASE WHEN c.outcome = 'client_error' THEN 0
                ELSE floor(exp(6.5 + 0.8 * r.radius * cos(r.angle)))::int END AS prompt,
           CASE WHEN c.outcome = 'ok' THEN floor(exp(4.5 + 0.9 * r.radius * sin(r.angle)))::int
                ELSE 0 END AS completion,
           CASE WHEN c.outcome = 'ok' THEN exp(ln(180) + 0.6 * r.radius2 * cos(r.angle2)) END AS ttft
    FROM (SELECT CASE WHEN r.pick < 0.92 THEN 'ok' WHEN r.pick < 0.95 THEN 'client_error'
                      WHEN r.pick < 0.97 THEN 'rate_limited' WHEN r.pick < 0.98 THEN 'upstream_error'
                      WHEN r.pick < 0.99 THEN 'timeout' ELSE 'cancelled' END AS outcome,
                 CASE WHEN r.pick < 0.92 THEN 200 WHEN r.pick < 0.95 THEN 400 WHEN r.pick < 0.97 THEN 429
                      WHEN r.pick < 0.98 THEN 502 WHEN r.pick < 0.99 THEN 504 ELSE 499 END AS status) c
) o
JOIN targets t ON t.idx = r.ti
"""


def generate(count: int, pool: list, start: datetime, end: datetime, *, run: str, batch: int, progress=None) -> int:
    """Insert `count` events in batches of `batch` rows, each one statement."""
    from usage.seeding import COLUMNS

    casts = ("int", "bigint", "text", "text", "bigint", "bigint")
    values = ", ".join("(" + ", ".join(f"%(v{row * 6 + col})s::{cast}" for col, cast in enumerate(casts)) + ")"
                       for row in range(len(pool)))
    sql = GENERATE_SQL.format(targets=values, table=UsageEvent._meta.db_table, columns=", ".join(COLUMNS))
    target_params = [p for i, t in enumerate(pool, 1)
                     for p in (i, t.tenant_id, t.key, t.version.model.name, t.version.pk, t.instance_id)]
    span = (end - start).total_seconds()
    # Into an empty table, build the indexes once at the end; otherwise maintain them (a rebuild would cost more).
    with indexes_built_after() if not UsageEvent.objects.exists() else nullcontext():
        for lo in range(0, count, batch):
            hi = min(lo + batch, count) - 1
            params = {"run": run, "start": start, "step": span / count, "lo": lo, "hi": hi, "targets": len(pool)}
            with connection.cursor() as cursor:
                cursor.execute(sql, _merge(target_params, params))
            if progress:
                progress(hi + 1)
    return count


@contextmanager
def indexes_built_after():
    """Drop the event table's indexes, unique and foreign-key constraints, insert, add them back — in one transaction.

    One sort per index and one join per foreign key at the end cost a fraction of maintaining the
    B-trees row by row and of queuing a deferred FK check per row (measured on 10M events: see
    docs/usage-and-cost.md); the transaction puts everything back if the seed fails.
    """
    table = UsageEvent._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                       "WHERE conrelid = %s::regclass AND contype IN ('u', 'f')", [table])
        constraints = cursor.fetchall()
        cursor.execute("SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.tablename = %s AND NOT EXISTS "
                       "(SELECT 1 FROM pg_constraint c WHERE c.conrelid = %s::regclass AND c.conname = i.indexname)",
                       [table, table])
        indexes = cursor.fetchall()
        for name, _ in constraints:
            cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
        for name, _ in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
        yield
        # Django's foreign keys are deferred; their pending checks must run before the table is altered.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SET LOCAL maintenance_work_mem = '256MB'")
        for name, definition in constraints:
            cursor.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
        for _, definition in indexes:
            cursor.execute(definition)
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")  # back to Django's default for the rest of the transaction


def _merge(positional: list, named: dict):
    """psycopg cannot mix %s and %(name)s: the VALUES list is named too (v0, v1, …)."""
    return {**named, **{f"v{i}": value for i, value in enumerate(positional)}}
