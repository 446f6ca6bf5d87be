"""Passing an engine's SSE stream through, event-aligned, while counting what it carries.

Bytes are forwarded as they arrive, cut only at event boundaries (a partial event waits for
its end). Without a token cap events are not decoded unless they mention usage, so a token
costs a substring scan.

Under a token cap (a budget) the stream is counted by what the engine reports: the gateway asks
for usage on every chunk (vLLM's `continuous_usage_stats`), which carries each choice's
completion tokens so far — exact however many tokens a chunk holds, for every choice. A chunk
without usage (an engine that does not report it) counts conservatively: one token per UTF-8
byte of its text (a byte-level BPE makes no more), and one for an empty delta (an end-of-text
token). The running usage is taken out of the chunks again unless the client asked for it.
"""
from __future__ import annotations

import json
import re

from gateway.errors import GatewayError
from gateway.pipeline.engine_errors import engine_error_event

SEPARATOR = b"\n\n"
DONE = b"data: [DONE]"
_INDEX = re.compile(rb'"index"\s*:\s*(\d+)')  # a chunk's first "index" is its choice's (it precedes usage)
_COMPLETION = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_PROMPT = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_USAGE_KEY = re.compile(rb'"usage"\s*:')
# The usage member of a chunk (its objects nest one level deep at most: *_tokens_details). A quote
# inside a JSON string is escaped, so `"usage"` followed by a colon can only be a key.
_RUNNING_USAGE = re.compile(rb',\s*"usage"\s*:\s*\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}')
# A token event ends with `]}` (its `choices` list closes the chunk object). vLLM ends a failed stream
# with an error event and [DONE] right after it, so an error event is either the last of its block,
# which then does not end so, or followed by [DONE] in the block: one byte of the block's end finds it.


class SseRelay:
    """Feeds upstream chunks in, gets client bytes out; knows tokens seen and the final usage."""

    __slots__ = ("_tail", "strip_usage", "token_cap", "usage", "streamed_tokens", "finished", "cut",
                 "strip_running_usage", "prompts", "choices_per_prompt", "_reported", "_prompt_tokens", "engine_error")

    def __init__(self, *, strip_usage: bool, token_cap: int | None = None, strip_running_usage: bool = False,
                 prompts: int = 1, choices_per_prompt: int = 1):
        self._tail = b""
        self.strip_usage = strip_usage  # the client did not ask for the usage chunk we injected
        self.token_cap = token_cap  # completion tokens of every choice together
        self.strip_running_usage = strip_running_usage  # nor for usage on every chunk
        self.prompts, self.choices_per_prompt = prompts, choices_per_prompt  # choice i answers prompt i // n
        self.usage: dict | None = None  # the final usage chunk's
        self.streamed_tokens = 0
        self.finished = False  # [DONE] seen
        self.cut = False  # token_cap reached: the caller must end the stream
        # The GatewayError of an error event the engine ended the stream with.
        self.engine_error: GatewayError | None = None
        self._reported: dict[int, list[int]] = {}  # choice -> [its running usage, counted since]
        self._prompt_tokens: dict[int, int] = {}  # prompt -> its tokens, from running usage

    @property
    def prompt_tokens(self) -> int | None:
        """The prompts' tokens from running usage, once every prompt's is known (else None)."""
        if len(self._prompt_tokens) < self.prompts:
            return None
        return sum(self._prompt_tokens.values())

    def feed(self, chunk: bytes) -> bytes:
        """The complete events in tail + chunk, minus any stripped ones; keeps the partial rest."""
        data = self._tail + chunk if self._tail else chunk
        end = data.rfind(SEPARATOR)
        if end < 0:
            self._tail = data
            return b""
        complete, self._tail = data[: end + 2], data[end + 2:]
        # data[end - 2] is the byte before the last event's closing brace: `]` ends a token event's choices.
        if self.token_cap is None and data[end - 2] == 93 and complete.find(b'"usage"') < 0 \
                and complete.find(b"[DONE]") < 0:
            self.streamed_tokens += _token_events(complete)  # the common case: plain token events
            return complete
        events = complete.split(SEPARATOR)
        if len(events) == 2:  # one event, the usual read of a stream
            return self._event(events[0])
        return b"".join(self._event(event) for event in events[:-1])

    def _event(self, event: bytes) -> bytes:
        if self.cut or self.engine_error is not None:
            return b""
        if event[-2:-1] != b"]" and event.find(b'"error"') >= 0 and self._engine_failed(event):  # not a token
            return b"data: " + self.engine_error.body() + SEPARATOR + DONE + SEPARATOR  # type: ignore[attr-defined]  # _engine_failed set it
        if event.startswith(DONE):
            self.finished = True
            return event + SEPARATOR
        at = _usage_at(event)
        choice = _INDEX.search(event, 0, at) if at >= 0 else None
        if at >= 0 and choice is None and self._take_usage(event):  # the usage-only (`choices: []`) chunk
            return b"" if self.strip_usage else event + SEPARATOR
        if choice is not None and self._take_running_usage(event, at, int(choice.group(1))):
            if self.strip_running_usage:
                event = _without_running_usage(event, at)
        elif self.token_cap is not None:
            self._count_conservatively(event)
        else:
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
        """Adopt the request's usage from the usage-only (`choices: []`) chunk; False for any other."""
        try:
            payload = json.loads(event.split(b"data:", 1)[1])
        except (IndexError, ValueError):
            return False
        usage = payload.get("usage") if isinstance(payload, dict) else None
        if not isinstance(usage, dict) or payload.get("choices"):
            return False
        self.usage = usage
        return True

    def _take_running_usage(self, event: bytes, at: int, index: int) -> bool:
        """A chunk's usage so far for its choice (vLLM's continuous usage); False if it holds none."""
        completion = _COMPLETION.search(event, at)
        if completion is None:
            return False
        state = self._reported.get(index)
        if state is None:
            state = self._reported[index] = [0, 0]
        used = int(completion.group(1))
        self.streamed_tokens += used - state[0] - state[1]  # what the engine reports replaces our count
        state[0], state[1] = used, 0
        of = index // self.choices_per_prompt
        if of not in self._prompt_tokens:  # a prompt's tokens do not change from chunk to chunk
            prompt = _PROMPT.search(event, at)
            if prompt is not None:
                self._prompt_tokens[of] = int(prompt.group(1))
        return True

    def _count_conservatively(self, event: bytes) -> None:
        """No usage in this chunk: each choice's text counts a token per UTF-8 byte (at least one)."""
        try:
            payload = json.loads(event.split(b"data:", 1)[1])
        except (IndexError, ValueError):
            return
        choices = payload.get("choices") if isinstance(payload, dict) else None
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            tokens = _delta_tokens(choice)
            index = choice.get("index")
            state = self._reported.setdefault(index if type(index) is int else 0, [0, 0])
            state[1] += tokens
            self.streamed_tokens += tokens


def _usage_at(event: bytes) -> int:
    """Where the event's `"usage"` key starts (-1: none). A text "usage" is a quoted string too,
    but only a key is followed by a colon."""
    at = event.find(b'"usage"')
    while at >= 0 and _USAGE_KEY.match(event, at) is None:
        at = event.find(b'"usage"', at + 7)
    return at


def _without_running_usage(event: bytes, at: int) -> bytes:
    """The event without its `,"usage":{...}` member (`at`: where `"usage"` starts)."""
    end = event.find(b"}", at)
    if event[at - 1:at] == b"," and event.find(b"{", at + 9, end) < 0:  # vLLM's: flat, after a comma
        return event[:at - 1] + event[end + 1:]
    return _RUNNING_USAGE.sub(b"", event, 1)


def _delta_tokens(choice: dict) -> int:
    """At most how many tokens a choice's delta holds; a role announcement holds none."""
    delta = choice.get("delta")
    if isinstance(delta, dict):
        if "role" in delta and not delta.get("content") and len(delta) <= 2:
            return 0
        return max(1, _text_bytes({k: v for k, v in delta.items() if k != "role"}))
    return max(1, _text_bytes(choice.get("text")))


def _text_bytes(value) -> int:
    """UTF-8 bytes of every string in a value (a delta's content, tool call names and arguments, ...)."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, dict):
        return sum(_text_bytes(v) for v in value.values())
    if isinstance(value, list):
        return sum(_text_bytes(v) for v in value)
    return 0


def _token_events(block: bytes) -> int:
    """Approximate tokens in a block of events: one per event with text, not the chat role event."""
    events = block.count(b"data: {")
    return events - block.count(b'"role":"assistant"')
