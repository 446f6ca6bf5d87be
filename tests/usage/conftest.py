import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def fresh_cache():
    """Budget answers are cached per tenant id, and ids repeat between tests."""
    cache.clear()
    yield
    cache.clear()
