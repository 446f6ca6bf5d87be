"""Whatever a request's strings hold, its usage row is stored, and so are the other rows of its batch.

PostgreSQL refuses NUL in text and no driver encodes a lone surrogate; either used to fail the whole
batch insert, every tenant's events in it. The storage boundary (`usage.storable`) escapes them.
"""
from datetime import datetime, timezone

import pytest
from django.db.models import CharField, TextField

from gateway.metering.recorder import RequestRecord
from tenants.services import delete_tenant
from tests.factories import SYSTEM
from usage import ingest
from usage.models import UsageEvent
from usage.services import record_usage_batch
from usage.storable import storable_text

AT = datetime(2026, 3, 4, 5, 6, 7, tzinfo=timezone.utc)
TEXT_COLUMNS = [f.attname for f in ingest.FIELDS if isinstance(f, (CharField, TextField))]
BAD = "a\x00b\ud800c"
BAD_STORED = "a\\u0000b\\ud800c"


def _event(request_id: str, tenant_id, **fields) -> dict:
    values = {"request_id": request_id, "occurred_at": AT, "tenant_id": tenant_id, "api_key_prefix": "sy_live_ab12",
              "user_id": None, "model_name": "tiny-coder", "model_version_id": None, "instance_id": None,
              "endpoint": "chat", "status_code": 404, "outcome": "client_error", "prompt_tokens": 0,
              "completion_tokens": 0, "cached_tokens": 0, "ttft_ms": None, "latency_ms": 1.5, "redactions": 0,
              "cache_hit": False, "fallback_used": False, "streamed": False, "redacted_prompt": "def f():",
              "wake_wait_ms": None, "retried_instance_id": None}
    values.update(fields)
    return values


def test_the_text_columns_are_every_string_column_of_a_usage_row():
    assert set(TEXT_COLUMNS) == {"request_id", "api_key_prefix", "model_name", "endpoint", "outcome",
                                 "redacted_prompt"}


@pytest.mark.parametrize("column", TEXT_COLUMNS)
@pytest.mark.parametrize("shape", ["row", "event"])
def test_nul_and_lone_surrogates_in_any_text_column_are_stored_escaped(tenant_a, column, shape):
    value = BAD if column != "request_id" else "req-" + BAD
    event = {**_event("req-plain", tenant_a.pk), column: value}
    assert record_usage_batch([[event[name] for name in ingest.COLUMNS] if shape == "row" else event]) == 1
    stored = UsageEvent.objects.get()
    assert getattr(stored, column) == (BAD_STORED if column != "request_id" else "req-" + BAD_STORED)


def test_one_bad_request_does_not_cost_the_other_tenants_their_rows(tenant_a, tenant_b):
    # The finding: `"model": "x\u0000y"` answered 404 failed the insert of everyone's batch.
    rows = [RequestRecord(f"req-{i}", "chat", tenant_id=tenant.pk, model_name=model, status_code=status,
                          outcome=outcome).as_row()
            for i, (tenant, model, status, outcome) in enumerate([
                (tenant_a, "tiny-coder", 200, "ok"), (tenant_b, "x\x00y", 404, "client_error"),
                (tenant_a, "x\ud800y", 404, "client_error"), (tenant_b, "tiny-coder", 200, "ok")])]
    assert record_usage_batch(rows) == 4
    assert dict(UsageEvent.objects.values_list("request_id", "model_name")) == {
        "req-0": "tiny-coder", "req-1": "x\\u0000y", "req-2": "x\\ud800y", "req-3": "tiny-coder"}


def test_text_copy_rows_are_made_storable_too(tenant_a):
    """An int in a float column sends the PostgreSQL batch through text COPY instead of binary."""
    event = _event("req-text-copy", tenant_a.pk, latency_ms=7, model_name="m\x00", redacted_prompt="p\udfff")
    assert record_usage_batch([event]) == 1
    stored = UsageEvent.objects.get()
    assert (stored.model_name, stored.redacted_prompt, stored.latency_ms) == ("m\\u0000", "p\\udfff", 7.0)


def test_huge_strings_are_cut_to_their_column_after_escaping(tenant_a):
    event = _event("req-huge", tenant_a.pk, model_name="\x00" * 10_000, redacted_prompt="é\x00" * 100_000,
                   api_key_prefix="k" * 500, endpoint="e" * 500, outcome="o" * 500)
    assert record_usage_batch([event]) == 1
    stored = UsageEvent.objects.get()
    assert stored.model_name == ("\\u0000" * 34)[:200]
    assert (len(stored.api_key_prefix), len(stored.endpoint), len(stored.outcome)) == (32, 20, 16)
    assert stored.redacted_prompt == "é\\u0000" * 100_000  # text: no limit, nothing cut


def test_odd_but_valid_unicode_is_stored_unchanged(tenant_a):
    odd = "😀 e\u0301 \u202eRTL\u202c \ufeff\uffff \U0010ffff \x01\x7f \\u0000 漢字"
    assert record_usage_batch([_event("req-odd", tenant_a.pk, model_name=odd, redacted_prompt=odd)]) == 1
    stored = UsageEvent.objects.get()
    assert (stored.model_name, stored.redacted_prompt) == (odd, odd)


def test_counts_beyond_their_column_are_clamped_not_refused(tenant_a):
    event = _event("req-counts", tenant_a.pk, prompt_tokens=2**40, completion_tokens=2**31, cached_tokens=2**40,
                   redactions=2**33, status_code=70_000)
    assert record_usage_batch([event]) == 1
    stored = UsageEvent.objects.get()
    assert (stored.prompt_tokens, stored.completion_tokens, stored.cached_tokens) == (2**31 - 1,) * 3
    assert (stored.redactions, stored.status_code) == (2**31 - 1, 32767)


def test_an_event_of_a_tenant_deleted_since_the_request_is_kept_without_tenant(tenant_a, tenant_b):
    gone = tenant_b.pk
    delete_tenant(tenant_b, actor=SYSTEM)
    assert record_usage_batch([_event("req-kept", tenant_a.pk), _event("req-orphan", gone)]) == 2
    assert dict(UsageEvent.objects.values_list("request_id", "tenant_id")) == {"req-kept": tenant_a.pk,
                                                                               "req-orphan": None}


@pytest.mark.parametrize("value, stored", [
    ("plain", "plain"), ("", ""), ("\x00", "\\u0000"),
    ("\ud83d\ude00", "\\ud83d\\ude00"),  # a split pair: two lone halves
    ("ü\x00\udc80", "ü\\u0000\\udc80"), ("😀", "😀")])
def test_storable_text_escapes_only_what_no_database_takes(value, stored):
    assert storable_text(value) == stored
    stored.encode("utf-8")  # and the result always encodes
    assert "\x00" not in stored


@pytest.mark.parametrize("request_id", ["x\x00y", "x\ud800y"])
def test_feedback_for_a_request_id_no_database_can_hold_is_a_validation_error(tenant_a, request_id):
    """PostgreSQL refused the NUL inside the lookup (a 500 on /v1/feedback); SQLite stored the NUL id."""
    from django.core.exceptions import ValidationError

    from usage.models import CompletionFeedback
    from usage.services import record_feedback

    with pytest.raises(ValidationError):
        record_feedback(request_id, True, tenant=tenant_a)
    assert not CompletionFeedback.objects.exists()
