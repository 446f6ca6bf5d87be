"""API keys by HMAC: looked up in the database once, then served from a bounded in-process LRU.

Unknown hashes are cached too, for a short TTL, so a flood of made-up keys cannot reach the
database; a semaphore caps how many cold lookups run at once. The whole cache is dropped on
every snapshot version change, which is how a revocation reaches every gateway process.
"""
from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Awaitable, Callable

from gateway.config.snapshot import KeyInfo

Loader = Callable[[str], Awaitable[KeyInfo | None]]
MISSING = object()


class KeyCache:
    """Positive entries live until the next clear; negative ones for `negative_ttl` seconds."""

    def __init__(self, loader: Loader, *, size: int, negative_ttl: float, max_cold_lookups: int = 4):
        self._loader = loader
        self._size = size
        self._negative_ttl = negative_ttl
        self._entries: OrderedDict[str, tuple[KeyInfo | None, float]] = OrderedDict()
        self._inflight: dict[str, asyncio.Future] = {}
        self._cold = asyncio.Semaphore(max_cold_lookups)
        self.generation = 0

    def clear(self) -> None:
        """Forget everything (called when the configuration version changes)."""
        self._entries.clear()
        self.generation += 1

    def peek(self, key_hash: str):
        """The cached answer without any lookup: a KeyInfo, None (known unknown) or `MISSING`."""
        return self._cached(key_hash)

    async def get(self, key_hash: str) -> KeyInfo | None:
        """The key for this hash, or None; at most one database lookup per hash at a time."""
        hit = self._cached(key_hash)
        if hit is not MISSING:
            return hit
        pending = self._inflight.get(key_hash)
        if pending is not None:
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this request itself was cancelled
        return await self._load(key_hash)

    def _cached(self, key_hash: str):
        entry = self._entries.get(key_hash)
        if entry is None:
            return MISSING
        info, expires = entry
        if info is None and expires <= time.monotonic():
            del self._entries[key_hash]
            return MISSING
        self._entries.move_to_end(key_hash)
        return info

    async def _load(self, key_hash: str) -> KeyInfo | None:
        future = asyncio.get_running_loop().create_future()
        self._inflight[key_hash] = future
        generation = self.generation
        try:
            async with self._cold:
                info = await self._loader(key_hash)
        except asyncio.CancelledError:
            future.cancel()  # waiters then look the key up themselves
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: there may be no waiter
            raise
        finally:
            self._inflight.pop(key_hash, None)
        # A clear() during the lookup means the row may predate a revocation: answer this
        # request with it (it raced the change) but do not cache it for later ones.
        if generation == self.generation:
            self._store(key_hash, info)
        future.set_result(info)
        return info

    def _store(self, key_hash: str, info: KeyInfo | None) -> None:
        expires = time.monotonic() + self._negative_ttl if info is None else float("inf")
        self._entries[key_hash] = (info, expires)
        self._entries.move_to_end(key_hash)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)
