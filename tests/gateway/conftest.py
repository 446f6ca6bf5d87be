"""Fixtures for the limiter tests: each test works under its own Redis key prefix."""
import asyncio
import uuid

import pytest

from gateway.limits.admission import make_client
from tests.gateway.ratelimit_helpers import redis_url


@pytest.fixture
def prefix():
    """A fresh key prefix; its keys are deleted afterwards (when Redis is there at all)."""
    name = f"sy:test:{uuid.uuid4().hex[:12]}"
    yield name
    url = redis_url()
    if url is None:
        return

    async def cleanup():
        client = make_client(url)
        keys = [k async for k in client.scan_iter(match=f"{name}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    asyncio.run(cleanup())
