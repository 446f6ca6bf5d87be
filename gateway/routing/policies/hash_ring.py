"""A consistent-hash ring with weighted virtual nodes."""
from __future__ import annotations

import bisect
import hashlib
from collections import OrderedDict
from typing import Iterator, Sequence

from gateway.routing.policies.base import Endpoint

RING_CACHE_SIZE = 16  # distinct pool shapes kept; a policy instance serves one or a few pools


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
        self.members = frozenset(member_id for _, member_id in points)
        self.size = len(self.members)

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


class RingCache:
    """The ring of a pool's endpoints, built once per set of members (least recently used dropped first)."""

    def __init__(self, vnodes: int = 160, size: int = RING_CACHE_SIZE) -> None:
        self._vnodes, self._size = vnodes, size
        self._rings: OrderedDict[tuple, HashRing] = OrderedDict()

    def ring(self, endpoints: Sequence[Endpoint]) -> HashRing:
        # The ring holds every weighted endpoint, healthy or not: an ejected engine's keys
        # move to its ring successors and come back when it returns; nothing else moves.
        # Cached by the members in the order given (a pool lists its engines in a stable
        # order); the ring itself does not depend on that order.
        members = tuple((e.id, e.weight) for e in endpoints if e.weight > 0)
        ring = self._rings.get(members)
        if ring is None:
            ring = self._rings[members] = HashRing(sorted(members), self._vnodes)
            if len(self._rings) > self._size:
                self._rings.popitem(last=False)
        elif len(self._rings) > 1:
            self._rings.move_to_end(members)
        return ring
