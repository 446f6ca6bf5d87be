"""Who got the last N requests: a fixed-size record of recent assignments, counted per endpoint."""
from __future__ import annotations

from collections import deque


class RecentAssignments:
    """The endpoint ids of the last `size` placements and how many each got.

    Memory is bounded by `size`: the oldest placement falls out as a new one comes in, and an
    id whose count drops to zero is forgotten, so departed endpoints leave no trace.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"window size must be at least 1, got {size}")
        self._ids: deque[str] = deque(maxlen=size)
        self._counts: dict[str, int] = {}

    def add(self, endpoint_id: str) -> None:
        if len(self._ids) == self._ids.maxlen:
            oldest = self._ids[0]
            left = self._counts[oldest] - 1
            if left:
                self._counts[oldest] = left
            else:
                del self._counts[oldest]
        self._ids.append(endpoint_id)
        self._counts[endpoint_id] = self._counts.get(endpoint_id, 0) + 1

    def clear(self) -> None:
        self._ids.clear()
        self._counts.clear()

    def count(self, endpoint_id: str) -> int:
        return self._counts.get(endpoint_id, 0)

    def __len__(self) -> int:
        return len(self._ids)
