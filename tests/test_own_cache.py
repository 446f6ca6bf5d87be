"""The tests' cache reset empties this install's cache and nothing else in a shared Redis database."""
import pytest
import redis
from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache

from tests.own_cache import clear_own_cache

pytestmark = pytest.mark.skipif(not isinstance(caches["default"], RedisCache), reason="needs REDIS_URL")


def test_clearing_the_cache_leaves_other_installs_keys_alone():
    other = redis.Redis.from_url(settings.REDIS_URL)
    foreign = "sy:some-other-install:cache::1:login-failures"
    other.set(foreign, "3", ex=60)
    cache.set("login-failures", 2, 60)
    try:
        clear_own_cache()
        assert cache.get("login-failures") is None
        assert other.get(foreign) == b"3"
    finally:
        other.delete(foreign)
