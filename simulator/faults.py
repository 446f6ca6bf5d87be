"""Fault injection that picks requests: `--error-rate` (vLLM's 500 at once) and `--hang-after-first-byte`
(the first byte, then nothing until the client leaves), each a share of generation requests.

Both draw from one random stream seeded with `--seed`, so which requests fail or hang is the same from run
to run; a fault set to 0 draws nothing, so turning one on leaves the other's picks as they were.
"""
from __future__ import annotations

import asyncio
import random
from typing import Awaitable, Callable, Sequence

from .config import SimulatorConfig
from .request import Request

Send = Callable[[dict], Awaitable[None]]


class FaultPicker:
    """Decides, request by request and in arrival order, which faults apply."""

    __slots__ = ("error_rate", "hang_rate", "_random")

    def __init__(self, config: SimulatorConfig) -> None:
        self.error_rate, self.hang_rate = config.error_rate, config.hang_after_first_byte
        self._random = random.Random(config.seed)

    def fails(self) -> bool:
        """This request is answered with vLLM's 500 at once."""
        return bool(self.error_rate) and self._random.random() < self.error_rate

    def hangs(self) -> bool:
        """This request stalls after its first byte."""
        return bool(self.hang_rate) and self._random.random() < self.hang_rate


async def hang_whole_answer(send: Send, body: bytes, requests: Sequence[Request]) -> None:
    """A whole (non-streamed) answer that hangs: the status line, headers announcing all of `body`, its first
    byte, and then nothing until the requests are aborted (the client left; its disconnect aborts them)."""
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body[:1], "more_body": True})
    loop = asyncio.get_running_loop()
    for req in requests:
        if not req.finished:  # stalled: only an abort finishes it, and resolves this fresh future
            req.done = loop.create_future()
            await req.done
