"""Requests for several sequences, served as vLLM serves them: `n` choices per prompt, a completions
batch of prompts, and streams with usage on every chunk (`continuous_usage_stats`).

Each sequence is an engine request of its own; choice `i` of prompt `p` has index `p * n + i`
(vLLM's order). Usage counts every prompt once and every generated token of every choice:
`prompt_tokens` = the prompts' tokens, `completion_tokens` = the sum over choices. A request for
one sequence without continuous usage takes the simulator's single-request path (`app.py`).
"""
from __future__ import annotations

import asyncio
import time
from functools import partial

from . import protocol
from .engine import STALLED
from .faults import hang_whole_answer
from .request import Request

SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


class _TaggedQueue:
    """What the engine sees as a request's stream queue: files each item, tagged, in the shared queue."""

    __slots__ = ("index", "shared")

    def __init__(self, index: int, shared: asyncio.Queue) -> None:
        self.index, self.shared = index, shared

    def put_nowait(self, item) -> None:
        self.shared.put_nowait((self.index, item))


def make_requests(app, params: protocol.GenerationParams, rid: str, hang: bool = False,
                  alone: bool = False) -> list[Request]:
    """One engine request per (prompt, choice), in index order, named ``<rid>-<index>``; choices draw from
    different seeds (``hang``: each stalls after its first token, fault injection). ``alone``: the one
    sequence of the single-request path (app.py), named ``rid``, with a stream queue of its own if it streams."""
    seed = params.seed if params.seed is not None else next(app._seeds)
    eos = 0.0 if params.ignore_eos else app.config.eos_probability
    stream = alone and params.stream
    return [Request(rid if alone else f"{rid}-{index}", tokens, params.max_tokens, priority=params.priority,
                    cache_salt=params.cache_salt, seed=seed + index, eos_probability=eos, stream=stream, hang=hang)
            for index, tokens in enumerate(t for t in params.all_prompts for _ in range(params.n))]


def total_usage(requests: list[Request], params: protocol.GenerationParams) -> dict:
    """The request's usage: every prompt once, every choice's tokens; cached tokens of the first prompt."""
    prompt_tokens = sum(len(tokens) for tokens in params.all_prompts)
    completion = sum(req.num_output_tokens for req in requests)
    return protocol.usage(prompt_tokens, completion, requests[0].num_cached_tokens or 0)


async def serve(app, scope: dict, receive, send, params: protocol.GenerationParams, chat: bool,
                hang: bool = False) -> None:
    """Enqueue every sequence, answer (streaming or not), and abort them all if the client leaves."""
    rid = ("chatcmpl-" if chat else "cmpl-") + app._next_id()
    requests = make_requests(app, params, rid, hang)
    shared: asyncio.Queue | None = asyncio.Queue() if params.stream else None
    engine = app.engine
    for index, req in enumerate(requests):
        if shared is not None:
            req.queue = _TaggedQueue(index, shared)
        engine.add_request(req)
    abort_all = partial(_abort_all, engine, requests)
    extensions = scope.get("extensions")
    register = extensions.get(app.disconnect_extension) if extensions else None
    watch = None
    if register is not None:
        register(abort_all)
    else:
        watch = app.watch_disconnect(receive, abort_all)
    answered = False
    try:
        if shared is not None:
            answered = await _stream(app, send, requests, params, shared)
        else:
            # engine.add_request above set every `done`: hence the ignore.
            reasons = await asyncio.gather(*(req.done for req in requests))  # type: ignore[arg-type]
            if STALLED in reasons:  # fault injection: answered never, aborted when the client leaves
                await hang_whole_answer(send, _body(app, requests, params, rid), requests)
            elif "abort" not in reasons:
                await _respond(app, send, requests, params, rid)
                answered = True
    except OSError:
        pass  # the client went away while we were writing
    finally:
        if register is not None:
            register(None)
        elif watch is not None:
            watch.stop(answered)
        if not answered:
            abort_all()


def _abort_all(engine, requests: list[Request]) -> None:
    for req in requests:
        engine.abort(req)


def _body(app, requests: list[Request], params: protocol.GenerationParams, rid: str) -> bytes:
    outputs = [(req.text(), req.finish_reason or "length") for req in requests]
    return protocol.choices_response(params, rid, int(time.time()), app.config.served_model_name, outputs,
                                     total_usage(requests, params))


async def _respond(app, send, requests: list[Request], params: protocol.GenerationParams, rid: str) -> None:
    body = _body(app, requests, params, rid)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _stream(app, send, requests: list[Request], params: protocol.GenerationParams,
                  shared: asyncio.Queue) -> bool:
    """One chunk per token of each choice, as the engine produces them; False if aborted."""
    enc = protocol.StreamEncoder(params.chat, requests[0].request_id.rsplit("-", 1)[0], int(time.time()),
                                 app.config.served_model_name)
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    state = _StreamState(requests, params)
    chunks = state.role_chunks(enc) if params.chat else []
    while True:
        items = [await shared.get()]
        while not shared.empty():  # coalesce what piled up into one write
            items.append(shared.get_nowait())
        if any(item is None and requests[index].finish_reason == "abort" for index, item in items):
            return False
        chunks += state.chunks(enc, items)
        done = state.open == 0
        if done:
            if params.include_usage:
                chunks.append(enc.usage_chunk(total_usage(requests, params)))
            chunks.append(enc.done())
        await send({"type": "http.response.body", "body": "".join(chunks).encode(), "more_body": not done})
        if done:
            return True
        chunks = []


class _StreamState:
    """Per choice: tokens sent so far (its running usage) and whether it has finished."""

    __slots__ = ("requests", "params", "counts", "open")

    def __init__(self, requests: list[Request], params: protocol.GenerationParams) -> None:
        self.requests, self.params = requests, params
        self.counts = [0] * len(requests)
        self.open = len(requests)

    def _use(self, index: int) -> dict | None:
        if not self.params.continuous_usage:
            return None
        prompt = len(self.params.all_prompts[index // self.params.n])
        return {"prompt_tokens": prompt, "completion_tokens": self.counts[index],
                "total_tokens": prompt + self.counts[index]}

    def role_chunks(self, enc: protocol.StreamEncoder) -> list[str]:
        return [enc.indexed_role_chunk(index, self._use(index)) for index in range(len(self.requests))]

    def chunks(self, enc: protocol.StreamEncoder, items: list) -> list[str]:
        """A chunk per token; a choice's last token carries its finish reason (an empty chunk if none came with it)."""
        pending: dict[int, str] = {}  # choice -> its token not yet written (its finish may follow)
        out: list[str] = []
        for index, item in items:
            if item is None:
                self.open -= 1
                out.append(enc.choice_chunk(index, pending.pop(index, ""), self.requests[index].finish_reason,
                                            self._use(index)))
                continue
            if index in pending:
                out.append(self._flush(enc, index, pending))
            self.counts[index] += 1
            pending[index] = item
        return out + [self._flush(enc, index, pending) for index in list(pending)]

    def _flush(self, enc: protocol.StreamEncoder, index: int, pending: dict) -> str:
        return enc.choice_chunk(index, pending.pop(index), None, self._use(index))
