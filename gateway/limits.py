"""The seam between a request and `gateway.ratelimit`: admit with a reservation, settle after."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Admission:
    """A granted request: the headers to echo, an optional token cap, and what to settle."""

    headers: list = field(default_factory=list)
    token_cap: int | None = None
    reservation: object = None
    settled: bool = False


class Limiter:
    """Admits everything until `gateway.ratelimit` is wired in."""

    def __init__(self, redis, metrics):
        self._redis = redis
        self._metrics = metrics

    async def admit(self, *, key, snapshot, model: str, reserve_tokens: int, request_id: str,
                    batch: bool = False) -> Admission:
        return Admission()

    async def settle(self, admission: Admission, *, used_tokens: int) -> None:
        admission.settled = True
