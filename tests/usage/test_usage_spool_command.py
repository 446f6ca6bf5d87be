"""manage.py usage_spool writes what a gateway left spooled or set aside, once, and keeps what is still refused."""
from io import StringIO

import pytest
from django.core.management import call_command

from gateway.metering.recorder import RequestRecord
from gateway.metering.spool import DEAD_LETTER_NAME, DeadLetter, UsageSpool
from usage.models import UsageEvent

pytestmark = pytest.mark.django_db(transaction=True)  # the replay writes from a thread of its own


def _row(tenant, request_id: str) -> list:
    return RequestRecord(request_id, "chat", tenant_id=tenant.pk, model_name="tiny-coder", status_code=200,
                         outcome="ok").as_row()


def test_replay_and_retry_store_each_event_once_and_keep_the_still_refused_one(tenant_a, tmp_path, settings):
    settings.SWITCHYARD_GATEWAY_USAGE_SPOOL_DIR = str(tmp_path)
    spool = UsageSpool(tmp_path, 1024 * 1024)
    spool.append([_row(tenant_a, f"spooled-{i}") for i in range(5)])
    spool.release()  # the gateway that spooled them is gone
    dead_letter = DeadLetter(tmp_path / DEAD_LETTER_NAME, 1024 * 1024)
    dead_letter.set_aside(_row(tenant_a, "mended"), ValueError("refused then, storable now"))
    still_refused = _row(tenant_a, "still-refused")
    still_refused[1] = None  # occurred_at is NOT NULL on every backend
    dead_letter.set_aside(still_refused, ValueError("refused"))

    out = StringIO()
    call_command("usage_spool", "--replay", "--retry-dead-letter", stdout=out)
    call_command("usage_spool", "--replay", stdout=out)  # again: nothing new is written
    assert sorted(UsageEvent.objects.values_list("request_id", flat=True)) == [
        "mended", *(f"spooled-{i}" for i in range(5))]
    assert "replayed 5 spooled events" in out.getvalue() and "1 events stored, 1 refused again" in out.getvalue()
    assert spool.size().segments == 0 and dead_letter.count() == 1
    assert dead_letter.take()[0][0]["request_id"] == "still-refused"
