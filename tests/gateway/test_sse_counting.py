"""How a relayed stream is counted and cut at its token cap (`gateway.pipeline.sse.SseRelay`): by the
usage the engine reports on every chunk, for every choice, however many tokens a chunk carries; and
conservatively (a token per byte) when a chunk reports none."""
from __future__ import annotations

import json

from gateway.pipeline.sse import SseRelay


def chunk(index: int, text: str, used: int | None = None, prompt: int = 5, chat: bool = True, delta=None,
          **choice) -> bytes:
    """One engine chunk as vLLM writes it, with its choice's running usage when `used` is given."""
    content = {"delta": {"content": text, **(delta or {})}} if chat else {"text": text}
    body = {"id": "cmpl-1", "object": "chat.completion.chunk" if chat else "text_completion", "created": 1,
            "model": "m", "choices": [{"index": index, **content, "logprobs": None, "finish_reason": None, **choice}]}
    if used is not None:
        body["usage"] = {"prompt_tokens": prompt, "total_tokens": prompt + used, "completion_tokens": used}
    return b"data: " + json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def final_usage(prompt: int, completion: int) -> bytes:
    body = {"id": "cmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}}
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


ROLE = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],'
        b'"usage":{"prompt_tokens":5,"total_tokens":5,"completion_tokens":0}}\n\n')


def events(out: bytes) -> list[dict]:
    return [json.loads(e[6:]) for e in out.split(b"\n\n") if e.startswith(b"data: {")]


def test_chunks_of_several_tokens_are_counted_by_their_usage_and_cut_at_the_cap():
    relay = SseRelay(strip_usage=True, token_cap=10, strip_running_usage=True)
    sent = [relay.feed(chunk(0, " many tokens at once", used=5 * i)) for i in (1, 2, 3)]
    assert relay.streamed_tokens == 15 and relay.cut
    assert len(events(sent[0] + sent[1])) == 2 and sent[2] == b""  # the chunk past the cap is not sent


def test_every_choice_counts_towards_the_cap():
    relay = SseRelay(strip_usage=True, token_cap=11, strip_running_usage=True, choices_per_prompt=3)
    for step in (1, 2, 3, 4):
        for index in range(3):
            relay.feed(chunk(index, " tok", used=step))
        if step < 4:
            assert not relay.cut and relay.streamed_tokens == 3 * step
    assert relay.cut and relay.streamed_tokens == 12  # the third choice's 4th token made 12 of 11


def test_running_usage_is_stripped_unless_the_client_asked_for_it():
    stripped = events(SseRelay(strip_usage=True, token_cap=99, strip_running_usage=True).feed(ROLE + chunk(0, "x", 1)))
    kept = events(SseRelay(strip_usage=False, token_cap=99).feed(ROLE + chunk(0, "x", 1)))
    assert [("usage" in e) for e in stripped] == [False, False]
    assert [e["usage"]["completion_tokens"] for e in kept] == [0, 1]
    assert stripped[1]["choices"][0]["delta"]["content"] == "x" and stripped[0]["choices"][0]["delta"]["role"]


def test_running_usage_with_nested_details_is_stripped_whole():
    nested = chunk(0, "x", 1).replace(b'"completion_tokens":1}',
                                      b'"completion_tokens":1,"completion_tokens_details":{"reasoning_tokens":0}}')
    (event,) = events(SseRelay(strip_usage=True, token_cap=99, strip_running_usage=True).feed(nested))
    assert "usage" not in event and event["choices"][0]["delta"]["content"] == "x"


def test_a_text_that_reads_usage_is_text():
    relay = SseRelay(strip_usage=True, token_cap=99, strip_running_usage=True)
    (event,) = events(relay.feed(chunk(0, "usage", used=1)))
    assert event["choices"][0]["delta"]["content"] == "usage" and "usage" not in event
    (plain,) = events(relay.feed(chunk(0, "usage")))  # no running usage: counted by its text (5 bytes)
    assert plain["choices"][0]["delta"]["content"] == "usage" and relay.streamed_tokens == 1 + 5


def test_the_final_usage_chunk_is_the_requests_usage():
    relay = SseRelay(strip_usage=True, token_cap=99, strip_running_usage=True)
    out = relay.feed(chunk(0, "a", 1) + chunk(1, "b", 1) + final_usage(5, 2) + b"data: [DONE]\n\n")
    assert relay.usage["completion_tokens"] == 2 and relay.finished
    assert out.count(b"data: {") == 2  # the usage chunk was injected by the gateway: not sent on


def test_prompt_tokens_are_known_from_running_usage_once_every_prompt_was_seen():
    relay = SseRelay(strip_usage=True, token_cap=99, prompts=2, choices_per_prompt=2)
    relay.feed(chunk(0, "a", 1, prompt=7, chat=False) + chunk(1, "b", 1, prompt=7, chat=False))
    assert relay.prompt_tokens is None  # prompt 1 (choices 2 and 3) not seen yet
    relay.feed(chunk(3, "c", 1, prompt=4, chat=False))
    assert relay.prompt_tokens == 11 and relay.streamed_tokens == 3


def test_without_usage_a_chunk_counts_a_token_per_byte_of_its_text():
    relay = SseRelay(strip_usage=True, token_cap=100)
    role = ROLE.replace(b',"usage":{"prompt_tokens":5,"total_tokens":5,"completion_tokens":0}', b"")
    relay.feed(role + chunk(0, "abcdefgh") + chunk(0, "😀") + chunk(0, "", finish_reason="stop"))
    assert relay.streamed_tokens == 0 + 8 + 4 + 1  # the role announces, an empty delta may be end-of-text
    tools = chunk(0, "", delta={"tool_calls": [{"index": 0, "function": {"name": "run", "arguments": "{\"a\":1}"}}]})
    relay.feed(tools)
    assert relay.streamed_tokens == 13 + len("run") + len('{"a":1}')


def test_a_later_report_replaces_the_conservative_count():
    relay = SseRelay(strip_usage=True, token_cap=100)
    relay.feed(chunk(0, "abcdefgh"))  # no usage: 8
    relay.feed(chunk(0, "ij", used=3))  # the engine says 3 so far for this choice
    assert relay.streamed_tokens == 3


def test_an_uncapped_stream_keeps_the_plain_pass_through():
    relay = SseRelay(strip_usage=True)
    data = chunk(0, "a") + chunk(0, "b")
    assert relay.feed(data) == data and relay.streamed_tokens == 2
