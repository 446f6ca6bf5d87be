"""Plain ASGI application exposing the vLLM OpenAI-compatible HTTP surface."""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import secrets
import time
from functools import partial
from typing import Awaitable, Callable, Iterator, Optional

from prometheus_client import CONTENT_TYPE_LATEST

from gateway.server.wire import DISCONNECT_EXTENSION  # the server's disconnect callback

from . import choices, protocol
from .config import SimulatorConfig
from .engine import STALLED, Engine
from .faults import FaultPicker, hang_whole_answer
from .metrics import SimulatorMetrics
from .recording import RequestRecorder
from .request import Request

Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]

JSON = b"application/json"
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"),
               (b"cache-control", b"no-cache")]


async def read_body(receive: Receive, msg: Optional[dict] = None) -> bytes:
    """Collect the full HTTP request body (``msg``: its first message, if already received)."""
    if msg is None:
        msg = await receive()
    body = msg.get("body", b"")
    if not msg.get("more_body"):
        return body
    parts = [body]
    while msg.get("more_body"):
        msg = await receive()
        parts.append(msg.get("body", b""))
    return b"".join(parts)


def random_hex_ids(batch: int = 256) -> Iterator[str]:
    """Endless random 32-hex-digit ids (like ``secrets.token_hex(16)``), read from the OS in batches.

    One getrandom() call per id was a visible share of a zero-latency request.
    """
    while True:
        pool = os.urandom(16 * batch).hex()
        for i in range(0, 32 * batch, 32):
            yield pool[i:i + 32]


async def send_bytes(send: Send, status: int, body: bytes, content_type: bytes = JSON) -> None:
    """Send a complete, non-streaming response."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


# A disconnect is first looked for this long after a request arrives.  A task
# waiting on receive() per request was a tenth of a zero-latency request's
# CPU, and most such requests are answered well within this delay; a client
# that leaves earlier is still noticed (and its request aborted) at the delay.
DISCONNECT_WATCH_DELAY = 0.01


class DisconnectWatch:
    """Aborts a request when its client disconnects, under ASGI servers other than the gateway's.

    (The gateway's HTTP server, gateway/server/, calls back on a disconnect instead:
    `switchyard.disconnect`, see SimulatorApp._generate.) A task watches receive(),
    started DISCONNECT_WATCH_DELAY after the request began."""

    __slots__ = ("gone", "receive", "timer", "task")

    def __init__(self, gone: Callable[[], None], receive: Receive) -> None:
        self.gone, self.receive = gone, receive  # gone: aborts the request's sequences
        self.task: asyncio.Task | None = None
        self.timer = asyncio.get_running_loop().call_later(DISCONNECT_WATCH_DELAY, self._start)

    def _start(self) -> None:
        """The request is still in progress: watch receive() from now on."""
        self.task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        """Abort the request as soon as the client disconnects."""
        while True:
            msg = await self.receive()
            if msg["type"] == "http.disconnect":
                self.gone()
                return

    def stop(self, answered: bool) -> None:
        """The handler is done: never start watching; cancel a watch unless it ends by itself."""
        self.timer.cancel()
        # Once the response is complete, the server's receive() answers
        # http.disconnect (ASGI spec), so the watcher ends by itself; that
        # is cheaper than cancelling it, which unwinds it with an exception.
        if self.task is not None and not answered:
            self.task.cancel()


class SimulatorApp:
    """The ASGI callable; one engine, one metrics registry per instance."""

    disconnect_extension = DISCONNECT_EXTENSION

    def __init__(self, config: SimulatorConfig) -> None:
        self.config = config
        self.metrics = SimulatorMetrics(config.served_model_name)
        self.engine = Engine(config, self.metrics)
        self.metrics.attach_engine(self.engine)
        self._seeds = itertools.count(config.seed << 32)
        self.faults = FaultPicker(config)  # which requests fail or hang: reproducible per seed
        self._next_id = random_hex_ids().__next__
        self._record = RequestRecorder(config.record_requests).record if config.record_requests else None
        self.routes = {
            "/health": ("GET", self._health),
            "/v1/models": ("GET", self._models),
            "/version": ("GET", self._version),
            "/metrics": ("GET", self._metrics),
            "/v1/completions": ("POST", self._completions),
            "/v1/chat/completions": ("POST", self._chat),
        }

    async def __call__(self, scope: dict, receive: Receive, send: Send) -> None:
        """ASGI entry point: route by path, answering 404/405 with FastAPI's shapes like vLLM."""
        if scope["type"] == "http":
            route = self.routes.get(scope["path"])
            if route is None:
                await send_bytes(send, 404, b'{"detail":"Not Found"}')
            elif scope["method"] != route[0]:
                await send_bytes(send, 405, b'{"detail":"Method Not Allowed"}')
            else:
                await route[1](scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """Start the engine loop at startup, cancel it at shutdown."""
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                self.engine.start()
                # As the gateway does (gateway/app.py): start-up state is never collected, and the
                # cyclic collector runs at 20,000 more live objects instead of every 700.
                gc.freeze()
                gc.set_threshold(20_000, *gc.get_threshold()[1:])
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await self.engine.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def watch_disconnect(self, receive: Receive, gone: Callable[[], None]) -> DisconnectWatch:
        """Calls ``gone`` when the client disconnects (ASGI servers without the gateway's callback)."""
        return DisconnectWatch(gone, receive)

    # -------------------------------------------------------- simple routes
    async def _health(self, scope: dict, receive: Receive, send: Send) -> None:
        """Liveness: 200 with an empty body."""
        await send_bytes(send, 200, b"", b"text/plain")

    async def _version(self, scope: dict, receive: Receive, send: Send) -> None:
        """Version endpoint (makes clear this is the simulator)."""
        await send_bytes(send, 200, b'{"version":"simulator"}')

    async def _models(self, scope: dict, receive: Receive, send: Send) -> None:
        """The single served model, in vLLM's ModelCard shape."""
        name, now = self.config.served_model_name, int(time.time())
        card = {"id": name, "object": "model", "created": now, "owned_by": "vllm", "root": name,
                "parent": None, "max_model_len": self.config.max_model_len,
                "permission": [{"id": f"modelperm-{secrets.token_hex(16)}", "object": "model_permission",
                                "created": now, "allow_create_engine": False, "allow_sampling": True,
                                "allow_logprobs": True, "allow_search_indices": False,
                                "allow_view": True, "allow_fine_tuning": False,
                                "organization": "*", "group": None, "is_blocking": False}]}
        await send_bytes(send, 200, protocol.dumps({"object": "list", "data": [card]}))

    async def _metrics(self, scope: dict, receive: Receive, send: Send) -> None:
        """Prometheus exposition of this instance's registry."""
        await send_bytes(send, 200, self.metrics.render(), CONTENT_TYPE_LATEST.encode())

    # These two return _generate's coroutine instead of awaiting it: one
    # coroutine frame less per request.
    def _completions(self, scope: dict, receive: Receive, send: Send) -> Awaitable[None]:
        """POST /v1/completions."""
        return self._generate(scope, receive, send, chat=False)

    def _chat(self, scope: dict, receive: Receive, send: Send) -> Awaitable[None]:
        """POST /v1/chat/completions."""
        return self._generate(scope, receive, send, chat=True)

    # ----------------------------------------------------------- generation
    async def _generate(self, scope: dict, receive: Receive, send: Send, chat: bool) -> None:
        """Validate, enqueue, then answer (streaming or not); abort on disconnect."""
        try:
            msg = await receive()  # the whole body, unless it is large
            raw = await read_body(receive, msg) if msg.get("more_body") else msg.get("body", b"")
            if self._record is not None:
                self._record(scope, raw)
            body = protocol.parse_json(raw)
            params = protocol.parse_request(body, chat, self.config, self.engine.max_request_tokens())
        except protocol.ProtocolError as exc:
            return await send_bytes(send, exc.status, exc.body())
        if self.config.max_num_queued_reqs and self.engine.unfinished() >= self.config.max_num_queued_reqs:
            return await send_bytes(send, 503, protocol.error_body(protocol.QUEUE_FULL, 503))
        if self.faults.fails():
            return await send_bytes(send, 500, protocol.error_body(protocol.GENERATION_FAILED, 500))
        hang = self.faults.hangs()
        if params.sequences > 1 or params.continuous_usage:
            return await choices.serve(self, scope, receive, send, params, chat, hang)
        rid = ("chatcmpl-" if chat else "cmpl-") + self._next_id()
        (req,) = choices.make_requests(self, params, rid, hang, alone=True)  # one sequence: checked above
        engine = self.engine
        engine.add_request(req)
        # Under the gateway's HTTP server the server calls back on a disconnect; there is no
        # DisconnectWatch object then, only the engine's abort bound to this request.
        extensions = scope.get("extensions")
        register = extensions.get(DISCONNECT_EXTENSION) if extensions else None
        if register is not None:
            register(partial(engine.abort, req))
        else:
            watch = DisconnectWatch(partial(engine.abort, req), receive)
        answered = False
        try:
            if params.stream:
                answered = await self._stream(send, req, params)
            else:  # inline, not a coroutine of its own: wait, then send one JSON body
                reason = await req.done  # type: ignore[misc]  # engine.add_request above set it
                if reason == STALLED:  # fault injection: answered never, aborted when the client leaves
                    await hang_whole_answer(send, self._response_body(req, params, "length"), [req])
                elif reason != "abort" and self._fails(req.num_output_tokens):  # vLLM's GenerationError
                    await send_bytes(send, 500, protocol.error_body(protocol.GENERATION_FAILED, 500))
                    answered = True
                elif reason != "abort":
                    await send_bytes(send, 200, self._response_body(req, params, reason))
                    answered = True
        except OSError:
            pass  # client went away while we were writing
        finally:
            if register is not None:
                register(None)
            else:
                watch.stop(answered)
            if not answered:  # an answered request has finished: abort would do nothing
                engine.abort(req)

    def _usage(self, req: Request) -> dict:
        """Usage object for a finished (or finishing) request."""
        return protocol.usage(req.num_prompt_tokens, req.num_output_tokens, req.num_cached_tokens or 0)

    def _response_body(self, req: Request, params: protocol.GenerationParams, reason: str) -> bytes:
        """Non-streaming JSON body of a finished request."""
        build = protocol.chat_response if params.chat else protocol.completion_response
        return build(req.request_id, int(time.time()), self.config.served_model_name,
                     req.text(), reason, self._usage(req))

    async def _stream(self, send: Send, req: Request, params: protocol.GenerationParams) -> bool:
        """Streaming: one SSE chunk per token, as the engine produces them; False if aborted."""
        enc = protocol.StreamEncoder(params.chat, req.request_id, int(time.time()),
                                     self.config.served_model_name)
        # Headers go out at once (as with vLLM's StreamingResponse); the first
        # data chunk only arrives once the engine has produced a token.
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        queue, first, sent = req.queue, True, 0
        while True:
            items = [await queue.get()]
            while not queue.empty():  # coalesce tokens that piled up into one write
                items.append(queue.get_nowait())
            done = items[-1] is None
            if done and req.finish_reason == "abort":
                return False
            if self.config.fail_after_tokens:
                tokens = len(items) - done
                if self._fails(sent + tokens):  # as vLLM ends a stream whose generation failed
                    before = items[:self.config.fail_after_tokens - 1 - sent]  # the tokens ahead of the failing one
                    chunks = self._chunks(enc, before, req, params, first=first) if before else \
                        [enc.role_chunk()] if first and params.chat else []
                    chunks += [protocol.stream_error_event(), enc.done()]
                    await send({"type": "http.response.body", "body": "".join(chunks).encode(), "more_body": False})
                    return False  # unanswered: the request is aborted, as vLLM's is
                sent += tokens
            chunks = self._chunks(enc, items, req, params, first=first)
            first = False
            await send({"type": "http.response.body", "body": "".join(chunks).encode(),
                        "more_body": not done})
            if done:
                return True

    def _fails(self, tokens: int) -> bool:
        """Fault injection (--fail-after-tokens N): a generation fails at its N-th token; a stream has sent
        the N-1 before it."""
        return 0 < self.config.fail_after_tokens <= tokens

    def _chunks(self, enc: protocol.StreamEncoder, items: list, req: Request,
                params: protocol.GenerationParams, first: bool) -> list[str]:
        """SSE chunks for a batch of queue items (tokens, maybe the end marker)."""
        tokens = [t for t in items if t is not None]
        finish = req.finish_reason if items[-1] is None else None
        chunks = [enc.role_chunk()] if first and params.chat else []
        for i, tok in enumerate(tokens):
            chunks.append(enc.token_chunk(tok, finish if i == len(tokens) - 1 else None))
        if finish is not None:
            if not tokens:
                chunks.append(enc.token_chunk("", finish))
            if params.include_usage:
                chunks.append(enc.usage_chunk(self._usage(req)))
            chunks.append(enc.done())
        return chunks


def build_app(config: Optional[SimulatorConfig] = None) -> SimulatorApp:
    """Create the ASGI app for a config (defaults if omitted)."""
    return SimulatorApp(config or SimulatorConfig())
