"""The de-duplication cache: identical deterministic requests answered from Redis for a while.

Only requests whose answer is fully determined by their body are cached: `temperature` exactly
0, not streamed, one choice (`n` absent or 1). The key is a SHA-256 of the tenant id, the model
versions serving the request and the canonical JSON of the body (less fields that cannot change
the answer), so tenants never share entries and a new model version starts cold. Any Redis
failure is a miss: the cache may only ever save work, never fail a request.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging

log = logging.getLogger("gateway.dedup")
OPT_OUT_HEADER = b"x-switchyard-cache"
# Fields that do not change what the engine answers (transport, attribution, scheduling).
IGNORED_FIELDS = frozenset({"stream", "stream_options", "user", "priority"})
_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def cacheable(payload: dict) -> bool:
    """Deterministic and whole: temperature 0, no stream, a single choice."""
    temperature = payload.get("temperature")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature != 0:
        return False  # absent means the engine's default (1.0 for vLLM): sampled, not repeatable
    return not payload.get("stream") and payload.get("n") in (None, 1)


def cache_key(prefix: str, tenant_id: int, version_ids: tuple[int, ...], kind: str, payload: dict) -> str:
    """The Redis key of one request's answer."""
    relevant = {name: value for name, value in payload.items() if name not in IGNORED_FIELDS}
    material = f"{tenant_id}\x00{','.join(map(str, version_ids))}\x00{kind}\x00{_canonical(relevant)}"
    return f"{prefix}:{tenant_id}:{hashlib.sha256(material.encode()).hexdigest()}"


class DedupCache:
    """get/put of whole JSON answers, stored with the model version that produced them."""

    def __init__(self, redis, *, ttl_seconds: float, prefix: str | None, timeout_seconds: float = 0.2):
        self._redis = redis
        self._timeout = timeout_seconds  # a hung Redis is a miss after this, like an unreachable one
        self.ttl_ms = int(ttl_seconds * 1000)
        self.prefix = prefix  # `sy:<install id>:dedup`; None (off) until the install id is known

    @property
    def enabled(self) -> bool:
        return self.ttl_ms > 0 and self._redis is not None and self.prefix is not None

    async def get(self, key: str) -> tuple[int | None, bytes] | None:
        """(model version id, body) of a stored answer, or None."""
        try:
            async with asyncio.timeout(self._timeout):
                stored = await self._redis.get(key)
        except Exception:  # an unreachable Redis is a miss, logged, never an error for the client
            log.warning("dedup cache lookup failed", exc_info=True)
            return None
        if not stored:
            return None
        version, _, body = stored.partition(b"\n")
        return (int(version) if version.isdigit() else None), body

    async def put(self, key: str, version_id: int | None, body: bytes) -> None:
        """Store an answer for the TTL."""
        try:
            async with asyncio.timeout(self._timeout):
                await self._redis.set(key, f"{version_id or ''}\n".encode() + body, px=self.ttl_ms)
        except Exception:
            log.warning("dedup cache store failed", exc_info=True)
