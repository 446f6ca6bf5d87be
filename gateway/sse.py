"""Passing an engine's SSE stream through, event-aligned, while counting what it carries.

Bytes are forwarded as they arrive, cut only at event boundaries (a partial event waits for
its end). Events are not decoded unless they mention usage, so a token costs a substring scan.
"""
from __future__ import annotations

import json

SEPARATOR = b"\n\n"
DONE = b"data: [DONE]"


class SseRelay:
    """Feeds upstream chunks in, gets client bytes out; knows tokens seen and the final usage."""

    __slots__ = ("_tail", "strip_usage", "token_cap", "usage", "streamed_tokens", "finished", "cut")

    def __init__(self, *, strip_usage: bool, token_cap: int | None = None):
        self._tail = b""
        self.strip_usage = strip_usage  # the client did not ask for the usage chunk we injected
        self.token_cap = token_cap
        self.usage: dict | None = None
        self.streamed_tokens = 0
        self.finished = False  # [DONE] seen
        self.cut = False  # token_cap reached: the caller must end the stream

    def feed(self, chunk: bytes) -> bytes:
        """The complete events in tail + chunk, minus any stripped ones; keeps the partial rest."""
        data = self._tail + chunk if self._tail else chunk
        end = data.rfind(SEPARATOR)
        if end < 0:
            self._tail = data
            return b""
        complete, self._tail = data[: end + 2], data[end + 2:]
        # find(), not `in`: bytes.__contains__ first tries its operand as an integer (raising and
        # clearing a TypeError), which costs more than the search itself on every chunk.
        if complete.find(b'"usage"') < 0 and complete.find(b"[DONE]") < 0 and self.token_cap is None:
            self.streamed_tokens += _token_events(complete)  # the common case: plain token events
            return complete
        return b"".join(self._event(event) for event in complete.split(SEPARATOR)[:-1])

    def _event(self, event: bytes) -> bytes:
        if self.cut:
            return b""
        if event.startswith(DONE):
            self.finished = True
            return event + SEPARATOR
        if event.find(b'"usage"') >= 0:
            usage_only = self._take_usage(event)
            if usage_only and self.strip_usage:
                return b""
            if usage_only:
                return event + SEPARATOR
        self.streamed_tokens += _token_events(event + SEPARATOR)
        if self.token_cap is not None and self.streamed_tokens > self.token_cap:
            self.cut = True
            return b""
        return event + SEPARATOR

    def _take_usage(self, event: bytes) -> bool:
        """Adopt a usage object; True when the event is the usage-only (`choices: []`) chunk."""
        try:
            payload = json.loads(event.split(b"data:", 1)[1])
        except (IndexError, ValueError):
            return False
        usage = payload.get("usage") if isinstance(payload, dict) else None
        if isinstance(usage, dict):
            self.usage = usage
        return isinstance(usage, dict) and not payload.get("choices")


def _token_events(block: bytes) -> int:
    """Approximate tokens in a block of events: one per event with text, not the chat role event."""
    events = block.count(b"data: {")
    return events - block.count(b'"role":"assistant"')
