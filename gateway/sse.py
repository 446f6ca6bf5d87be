"""Passing an engine's SSE stream through, event-aligned, while counting what it carries.

Bytes are forwarded as they arrive, cut only at event boundaries (a partial event waits for
its end). Events are not decoded unless they mention usage, so a token costs a substring scan.
"""
from __future__ import annotations

import json

from gateway.engine_errors import engine_error_event

SEPARATOR = b"\n\n"
DONE = b"data: [DONE]"
# A token event ends with `]}` (its `choices` list closes the chunk object). vLLM ends a failed stream
# with an error event and [DONE] right after it, so an error event is either the last of its block,
# which then does not end so, or followed by [DONE] in the block: one byte of the block's end finds it
# (a third scan of every token event for "error" cost ~1.6k instructions, endswith() ~1.2k).


class SseRelay:
    """Feeds upstream chunks in, gets client bytes out; knows tokens seen and the final usage."""

    __slots__ = ("_tail", "strip_usage", "token_cap", "usage", "streamed_tokens", "finished", "cut", "engine_error")

    def __init__(self, *, strip_usage: bool, token_cap: int | None = None):
        self._tail = b""
        self.strip_usage = strip_usage  # the client did not ask for the usage chunk we injected
        self.token_cap = token_cap
        self.usage: dict | None = None
        self.streamed_tokens = 0
        self.finished = False  # [DONE] seen
        self.cut = False  # token_cap reached: the caller must end the stream
        self.engine_error = None  # the GatewayError of an error event the engine ended the stream with

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
        # data[end - 2] is the byte before the last event's closing brace: `]` ends a token event's choices.
        if data[end - 2] == 93 and complete.find(b'"usage"') < 0 and complete.find(b"[DONE]") < 0 \
                and self.token_cap is None:
            self.streamed_tokens += _token_events(complete)  # the common case: plain token events
            return complete
        return b"".join(self._event(event) for event in complete.split(SEPARATOR)[:-1])

    def _event(self, event: bytes) -> bytes:
        if self.cut or self.engine_error is not None:
            return b""
        if event[-2:-1] != b"]" and event.find(b'"error"') >= 0 and self._engine_failed(event):  # not a token
            return b"data: " + self.engine_error.body() + SEPARATOR + DONE + SEPARATOR
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

    def _engine_failed(self, event: bytes) -> bool:
        """Whether `event` is an engine's error (vLLM's `{"error": {...}}`); then it is re-shaped and ends
        the stream. (In a token's text the quotes of `"error"` are escaped, so a match is a key or value.)"""
        self.engine_error = engine_error_event(event)
        if self.engine_error is None:
            return False
        self.finished = True
        return True

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
