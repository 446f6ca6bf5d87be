"""A flood of bad API keys writes a bounded number of audit rows, and says how many it left out."""
import pytest
from django.core.cache import cache

from apikeys import keyformat
from apikeys.rejections import window_key
from audit.models import AuditEvent
from tests.conftest import bearer
from tests.own_cache import clear_own_cache


@pytest.fixture
def sampling(settings, db):
    settings.SWITCHYARD_REJECTED_KEY_AUDIT_WINDOW_SECONDS = 60
    settings.SWITCHYARD_REJECTED_KEY_AUDIT_MAX_ROWS = 5
    clear_own_cache()
    yield
    clear_own_cache()


def rejection_rows():
    rows = AuditEvent.objects.filter(action="auth.api_key_rejected").order_by("seq")
    return list(rows.values_list("after", flat=True))


def test_repeats_of_one_bad_key_are_counted_not_recorded(db, sampling):
    unknown = keyformat.generate_key()
    for _ in range(20):
        assert bearer(unknown).get("/api/v1/tenants/").status_code == 401
    assert rejection_rows() == [{"reason": "unknown API key", "prefix": keyformat.display_prefix(unknown)}]


def test_the_count_rides_on_the_next_row_of_the_same_key_and_reason(db, sampling):
    unknown = keyformat.generate_key()
    for _ in range(4):
        bearer(unknown).get("/api/v1/tenants/")
    cache.delete(window_key(keyformat.display_prefix(unknown), "unknown API key"))  # the window ends
    bearer(unknown).get("/api/v1/tenants/")
    assert [row.get("similar_attempts_not_recorded") for row in rejection_rows()] == [None, 3]


def test_ever_new_made_up_keys_hit_the_overall_cap(db, sampling):
    for _ in range(30):
        assert bearer(keyformat.generate_key()).get("/api/v1/tenants/").status_code == 401
    assert len(rejection_rows()) == 5


def test_zero_window_records_every_attempt(db, settings):
    settings.SWITCHYARD_REJECTED_KEY_AUDIT_WINDOW_SECONDS = 0
    unknown = keyformat.generate_key()
    for _ in range(3):
        bearer(unknown).get("/api/v1/tenants/")
    assert len(rejection_rows()) == 3
