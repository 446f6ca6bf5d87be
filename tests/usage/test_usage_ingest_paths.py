"""Every way into the usage table stores what Django's own `bulk_create` stores for the same event.

The ingest has fast paths (dicts with every column, rows in column order, binary COPY on
PostgreSQL, UTC datetimes prepared without Django's field); these compare them with the ORM.
"""
import warnings
from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection

from usage import ingest
from usage.models import Outcome, UsageEvent
from usage.services import record_usage_batch

AT = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=timezone.utc)
PLUS_TWO = timezone(timedelta(hours=2))


def _varied(tenant) -> list[dict]:
    """Events with every column given by attname (as the gateway sends them), in many shapes."""
    base = {"request_id": "", "occurred_at": AT, "tenant_id": tenant.pk, "api_key_prefix": "sy_live_ab12",
            "user_id": 7, "model_name": "tiny-coder", "model_version_id": 3, "instance_id": 2**40,
            "endpoint": "chat", "status_code": 200, "outcome": "ok", "prompt_tokens": 120,
            "completion_tokens": 30, "cached_tokens": 64, "ttft_ms": 12.345678901234567,
            "latency_ms": 1234.5678901234567, "redactions": 0, "cache_hit": False, "fallback_used": False,
            "streamed": True, "redacted_prompt": "def f():\n\treturn '\\x' # ünïcode ✓ \\N", "wake_wait_ms": None,
            "retried_instance_id": None}
    shapes = [
        {},
        {"ttft_ms": None, "user_id": None, "model_version_id": None, "instance_id": None},
        {"cached_tokens": 500, "prompt_tokens": 40},  # the engine claims more cached than prompt
        {"cache_hit": True, "fallback_used": True, "streamed": False, "redactions": 3},
        {"wake_wait_ms": 81234.5},  # waited for its deployment to wake from zero
        {"status_code": 429, "outcome": "rate_limited", "prompt_tokens": 0, "completion_tokens": 0,
         "cached_tokens": 0, "latency_ms": 0.0, "redacted_prompt": "", "api_key_prefix": ""},
        {"occurred_at": AT.replace(microsecond=0)},  # no fraction: SQLite's text has none either
        # SQLite's text is formatted once per second, then the fraction added: leading zeros, the next second.
        {"occurred_at": AT.replace(microsecond=5)},
        {"occurred_at": AT.replace(microsecond=1000)},
        {"occurred_at": AT + timedelta(seconds=1, microseconds=7)},
        {"occurred_at": AT + timedelta(days=40)},
        {"occurred_at": AT.astimezone(PLUS_TWO)},  # aware, not UTC
        {"latency_ms": 7, "ttft_ms": 1e-300, "model_name": "m" * 200},  # an int in a float column
    ]
    return [{**base, **shape, "request_id": f"varied-{index}"} for index, shape in enumerate(shapes)]


def _mixed(tenant) -> list[dict]:
    """Events as tests and tools write them: by field name, enums, defaults left out, naive times."""
    return [
        {"request_id": "mixed-0", "occurred_at": AT, "tenant": tenant, "status_code": 200, "outcome": Outcome.OK},
        {"request_id": "mixed-1", "occurred_at": AT, "tenant": None, "status_code": 504,
         "outcome": Outcome.TIMEOUT, "prompt_tokens": 5, "cached_tokens": 9, "ttft_ms": None},
        {"request_id": "mixed-2", "occurred_at": AT.replace(tzinfo=None), "tenant_id": tenant.pk,
         "status_code": 200, "outcome": "ok", "cache_hit": 1},
    ]


def _by_orm(events: list[dict]) -> None:
    """The reference: model instances through bulk_create, with the ingest's one rule (cached ⊆ prompt)."""
    objs = [UsageEvent(**event) for event in events]
    for obj in objs:
        obj.cached_tokens = min(obj.cached_tokens, obj.prompt_tokens)
    UsageEvent.objects.bulk_create(objs, ignore_conflicts=True)


def _stored(prefix: str) -> list[tuple]:
    """The stored values as the database returns them (SQLite's datetime text included), without ids."""
    columns = ", ".join(connection.ops.quote_name(column) for column in ingest.COLUMNS)
    with connection.cursor() as cursor:
        # The datetime's text too: SQLite compares it as text, so "T" for " " would break time ranges.
        cursor.execute(f"SELECT {columns}, CAST(occurred_at AS TEXT) FROM {UsageEvent._meta.db_table} "
                       f"WHERE request_id LIKE %s "
                       f"ORDER BY request_id", [prefix + "%"])
        return [(row[0].removeprefix(prefix), *row[1:]) for row in cursor.fetchall()]


def _renamed(events: list[dict], prefix: str) -> list[dict]:
    return [{**event, "request_id": prefix + event["request_id"]} for event in events]


def _write_both_ways(events: list[dict], write) -> tuple[list[tuple], list[tuple]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # naive datetimes warn either way
        _by_orm(_renamed(events, "orm-"))
        assert write(_renamed(events, "fast-")) == len(events)
    return _stored("orm-"), _stored("fast-")


def test_gateway_batches_store_what_the_orm_stores(tenant_a):
    orm, fast = _write_both_ways(_varied(tenant_a), record_usage_batch)
    assert fast == orm and len(fast) == len(_varied(tenant_a))


def test_events_by_field_name_store_what_the_orm_stores(tenant_a):
    # The insert itself: record_usage_batch refuses naive datetimes when it marks late hours.
    orm, fast = _write_both_ways(_mixed(tenant_a), ingest.insert_events)
    assert fast == orm and len(fast) == len(_mixed(tenant_a))


def test_rows_in_column_order_store_what_dicts_store(tenant_a):
    events = _varied(tenant_a)
    orm, rows = _write_both_ways(events, lambda renamed: ingest.insert_events(
        [[event[column] for column in ingest.COLUMNS] for event in renamed]))
    assert rows == orm


def test_rows_are_not_modified(tenant_a):
    row = [_varied(tenant_a)[2][column] for column in ingest.COLUMNS]
    before = list(row)
    assert ingest.insert_events([row]) == 1
    assert row == before  # a retried batch is prepared again from the same values


@pytest.mark.skipif(connection.vendor != "postgresql", reason="COPY formats are PostgreSQL's")
def test_text_and_binary_copy_store_the_same(tenant_a, monkeypatch):
    events = _varied(tenant_a)
    rows = [ingest._row_of(event) for event in events]
    ingest._prepare(rows, connection)
    assert ingest._binary_fits(rows, ingest._column_types(connection))  # the gateway's events go binary
    monkeypatch.setattr(ingest, "_binary_fits", lambda rows, types: False)
    orm, text = _write_both_ways(events, record_usage_batch)
    assert text == orm


@pytest.mark.skipif(connection.vendor != "postgresql", reason="COPY formats are PostgreSQL's")
def test_values_binary_copy_would_store_differently_go_as_text(tenant_a):
    types = ingest._column_types(connection)
    fits = [ingest._row_of(event) for event in _varied(tenant_a)]
    ingest._prepare(fits, connection)
    for column, odd in (("outcome", Outcome.OK), ("cache_hit", 1), ("status_code", True), ("tenant_id", "5")):
        row = list(fits[0])
        row[ingest.COLUMNS.index(column)] = odd
        assert not ingest._binary_fits(fits + [row], types), column


def test_a_resent_row_batch_counts_once(tenant_a):
    rows = [[event[column] for column in ingest.COLUMNS] for event in _varied(tenant_a)]
    assert ingest.insert_events(rows) == len(rows)
    assert ingest.insert_events(rows) == 0
    assert UsageEvent.objects.count() == len(rows)


def test_batches_of_every_size_count_each_new_request_once(tenant_a):
    # SQLite inserts many rows per statement (full statements, then power-of-two ones): every size
    # up to a few statements' worth, with a row already stored and one repeated inside the batch.
    template = [_varied(tenant_a)[0][column] for column in ingest.COLUMNS]
    at = ingest.COLUMNS.index("request_id")
    for size in (1, 2, 3, 7, 128, 129, 300):
        rows = [[*template[:at], f"size-{size}-{n}", *template[at + 1:]] for n in range(size)]
        assert ingest.insert_events(rows[:1]) == 1
        assert ingest.insert_events(rows + rows[-1:]) == size - 1, size
        assert UsageEvent.objects.filter(request_id__startswith=f"size-{size}-").count() == size


@pytest.mark.django_db(transaction=True)
def test_an_insert_outside_any_transaction_is_stored():
    # Not inside the service's transaction (nor a test's): on PostgreSQL the COPY's temporary rows
    # must still be there when the INSERT reads them.
    from tests.factories import make_tenant

    events = _varied(make_tenant("autocommit"))
    assert ingest.insert_events(events) == len(events)
    assert UsageEvent.objects.filter(request_id__startswith="varied-").count() == len(events)
    assert ingest.insert_events(events) == 0
