"""A request's usage row (`as_row`) stores exactly what its usage event (`as_event`) stores."""
import asyncio
from datetime import datetime, timezone

from django.db import connection

from gateway.metering.recorder import ROW_FIELDS, RequestRecord, UsageRecorder
from usage import ingest
from usage.models import UsageEvent
from usage.services import record_usage_batch


def test_row_fields_are_the_usage_columns_in_order():
    assert ROW_FIELDS == ingest.COLUMNS


def _records(tenant_id: int) -> list[RequestRecord]:
    """Requests as the pipeline leaves them: served, cached, fallen back, refused, cut off."""
    served = RequestRecord("served", "chat", tenant_id=tenant_id, api_key_prefix="sy_live_ab12", user_id=7,
                           model_name="tiny-coder", model_known=True, model_version_id=3, instance_id=11,
                           streamed=True, status_code=200, outcome="ok", redactions=2,
                           redacted_prompt="key=[REDACTED:aws_access_key]\n\tand a \\ backslash ✓")
    served.mark_first_byte()
    served.take_usage({"prompt_tokens": 120, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 64}})
    overclaimed = RequestRecord("overclaimed", "completions", tenant_id=tenant_id, model_name="tiny-coder",
                                status_code=200, outcome="ok")
    overclaimed.take_usage({"prompt_tokens": 10, "completion_tokens": 5,
                            "prompt_tokens_details": {"cached_tokens": 99}})
    cached = RequestRecord("cached", "chat", tenant_id=tenant_id, model_name="tiny-coder", status_code=200,
                           outcome="ok", cache_hit=True)
    cached.mark_first_byte()
    cached.take_cached_usage({"prompt_tokens": 40, "completion_tokens": 8})
    fallback = RequestRecord("fallback", "chat", tenant_id=tenant_id, model_name="m" * 250, status_code=200,
                             outcome="ok", fallback_used=True, instance_id=None)
    refused = RequestRecord("refused", "chat", tenant_id=tenant_id, status_code=429, outcome="rate_limited")
    gone = RequestRecord("gone", "completions", tenant_id=tenant_id, status_code=499, outcome="cancelled")
    return [served, overclaimed, cached, fallback, refused, gone]


def test_as_row_holds_as_event_values():
    record = _records(1)[0]
    event, row = record.as_event(), record.as_row()
    assert list(event) == list(ROW_FIELDS)
    # Only the two clocks read at call time may differ.
    moving = {"occurred_at", "latency_ms"}
    assert {k: v for k, v in event.items() if k not in moving} == {
        k: v for k, v in zip(ROW_FIELDS, row) if k not in moving}
    assert isinstance(row[ROW_FIELDS.index("occurred_at")], datetime)
    assert row[ROW_FIELDS.index("occurred_at")].tzinfo is timezone.utc


def _stored(request_id_prefix: str) -> list[tuple]:
    columns = ", ".join(connection.ops.quote_name(column) for column in ingest.COLUMNS if column != "request_id")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT request_id, {columns}, CAST(occurred_at AS TEXT) FROM {UsageEvent._meta.db_table} "
                       f"WHERE request_id LIKE %s ORDER BY request_id", [request_id_prefix + "%"])
        return [(row[0].removeprefix(request_id_prefix), *row[1:]) for row in cursor.fetchall()]


def _event_and_row(record: RequestRecord) -> tuple[dict, list]:
    """Both shapes of one record, with the same clocks (as_event reads them when called)."""
    event = record.as_event()
    row = [event[field] for field in ROW_FIELDS]
    return ({**event, "request_id": "event-" + record.request_id},
            ["row-" + record.request_id, *row[1:]])


def test_rows_and_events_store_the_same_through_the_recorder(tenant_a):
    pairs = [_event_and_row(record) for record in _records(tenant_a.pk)]

    batches = []

    async def record_all():  # batches of 4 mix events and rows
        recorder = UsageRecorder(lambda batch: batches.append(batch) or len(batch), run_in_thread=_inline,
                                 batch_size=4)
        for event, row in pairs:
            recorder.record(event)
            recorder.record(row)
        await recorder.flush()

    asyncio.run(record_all())
    # The service write_batch calls, outside the event loop (the ORM refuses to run inside one).
    assert sum(record_usage_batch(batch) for batch in batches) == 2 * len(pairs)
    assert _stored("row-") == _stored("event-")
    assert len(_stored("row-")) == len(pairs)
    stored = UsageEvent.objects.get(request_id="row-overclaimed")
    assert (stored.prompt_tokens, stored.cached_tokens) == (10, 10)  # cached ⊆ prompt
    assert UsageEvent.objects.get(request_id="row-fallback").model_name == "m" * 200


def test_a_retried_row_batch_counts_once(tenant_a):
    rows = [record.as_row() for record in _records(tenant_a.pk)]
    assert record_usage_batch(rows) == len(rows)
    assert record_usage_batch(rows + [RequestRecord("late", "chat", tenant_id=tenant_a.pk, status_code=200,
                                             outcome="ok").as_row()]) == 1
    assert UsageEvent.objects.count() == len(rows) + 1


async def _inline(func, *args):
    return func(*args)
