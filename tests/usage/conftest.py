import pytest
from django.core.cache import cache

from usage.services import BUDGET_CACHE_KEY


def _forget_budget_answers():
    # Only our own keys: with REDIS_URL the cache is shared, and clear() would flush everyone's data.
    cache.delete_many([BUDGET_CACHE_KEY.format(tenant_id) for tenant_id in range(1, 500)])


@pytest.fixture(autouse=True)
def fresh_budget_cache(db):
    """Budget answers are cached per tenant id, and ids repeat between tests (the keys carry the install id,
    read from the database: hence `db`)."""
    _forget_budget_answers()
    yield
    _forget_budget_answers()
