"""A consistent-hash ring with weighted virtual nodes."""
from __future__ import annotations

import bisect
import hashlib
from typing import Iterator, Sequence


def hash64(text: str) -> int:
    """A stable 64-bit hash (Python's hash() changes per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Endpoint ids placed at `round(vnodes × weight)` points on a 64-bit circle."""

    def __init__(self, members: Sequence[tuple[str, float]], vnodes: int = 160) -> None:
        points = sorted(
            (hash64(f"{member_id}#{i}"), member_id)
            for member_id, weight in members
            for i in range(max(1, round(vnodes * weight)) if weight > 0 else 0)
        )
        self._hashes = [h for h, _ in points]
        self._ids = [member_id for _, member_id in points]
        self.size = len({member_id for _, member_id in points})

    def walk(self, key: str) -> Iterator[str]:
        """Distinct member ids clockwise from the key's point: owner first, then spill order."""
        if not self._hashes:
            return
        start = bisect.bisect(self._hashes, hash64(key))
        seen: set[str] = set()
        for offset in range(len(self._ids)):
            member_id = self._ids[(start + offset) % len(self._ids)]
            if member_id not in seen:
                seen.add(member_id)
                yield member_id
                if len(seen) == self.size:
                    return
