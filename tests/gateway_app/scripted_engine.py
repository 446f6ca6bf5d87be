"""A stand-in engine for tests only: answers each request with canned raw bytes, chosen by its prompt.

Real engines' errors come in shapes the simulator does not produce (HTML from a proxy, bodies that
are not UTF-8, a body that stalls); this one sends exactly the bytes a test names, on loopback.
The prompt (`prompt`, or the last message's content) is the name of the answer in ANSWERS.
"""
from __future__ import annotations

import asyncio
import json
import threading
from http import HTTPStatus

from tests.processes import free_port

SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"


def answer(status: str, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
        status.encode(), content_type, len(body), body)


def vllm_error(status: int, message: str, err_type: str, param: str | None = None) -> bytes:
    """vLLM 0.32's ErrorResponse (vllm/entrypoints/serve/engine/protocol.py), as its JSONResponse encodes it."""
    body = json.dumps({"error": {"message": message, "type": err_type, "param": param, "code": status}},
                      separators=(",", ":")).encode()
    return answer(f"{status} {HTTPStatus(status).phrase}", body)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def token_event(text: str) -> bytes:
    return b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"sim-coder",' \
           b'"choices":[{"index":0,"text":"%s","logprobs":null,"finish_reason":null}]}\n\n' % text.encode()


CONTEXT = ("This model's maximum context length is 1024 tokens. However, your prompt contains 1400 input tokens, "
           "which exceeds this limit even without any output tokens. Please reduce the length of the input "
           "prompt. (parameter=input_tokens, value=1400)")
CLOSE = None  # a step that closes the connection (no answer, or none left)
# Each answer: bytes, or (seconds to wait first, bytes or CLOSE) steps.
ANSWERS = {
    # An engine that takes the request, then drops the connection before any answer (it died, it restarts).
    "closes-after-2s": ((2.0, CLOSE),),
    # A stream queued in the engine: its headers at once (as vLLM sends them), its first token 3 s later.
    "stream-queued-3s": (SSE_HEAD, (3.0, chunk(token_event("def")) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")),
    "vllm-context": vllm_error(400, CONTEXT, "BadRequestError", "input_tokens"),
    "vllm-validation": vllm_error(400, "1 validation error:\n  {'type': 'int_parsing', 'loc': ('body', 'max_tokens'), "
                                       "'msg': 'Input should be a valid integer', 'input': 'x'}",
                                  "Bad Request", "body.max_tokens"),
    "vllm-not-found": vllm_error(404, "The model `sim-coder` does not exist. Valid aliases: other.", "NotFoundError",
                                 "model"),
    "vllm-overloaded": vllm_error(503, "The engine is currently busy and cannot accept new requests. Please try "
                                       "again later or on a different instance.", "Service Unavailable"),
    "vllm-internal": vllm_error(500, "Internal server error", "InternalServerError"),
    "vllm-old-shape": answer("400 Bad Request", b'{"object":"error","message":"best_of must be 1 when using greedy '
                                                b'sampling.","type":"BadRequestError","param":null,"code":400}'),
    "fastapi-validation": answer("422 Unprocessable Entity", b'{"detail":[{"type":"int_parsing","loc":["body",'
                                                             b'"max_tokens"],"msg":"Input should be a valid integer",'
                                                             b'"input":"x"}]}'),
    "fastapi-not-found": answer("404 Not Found", b'{"detail":"Not Found"}'),
    "plain-500": answer("500 Internal Server Error", b"Internal Server Error", b"text/plain; charset=utf-8"),
    "html-502": answer("502 Bad Gateway", b"<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 "
                                          b"Bad Gateway</h1></center><hr><center>nginx</center></body></html>",
                       b"text/html"),
    "traceback-500": answer("500 Internal Server Error", json.dumps({"error": {
        "message": "boom\nTraceback (most recent call last):\n  File \"/opt/vllm/x.py\", line 3, in f\n    raise E",
        "type": "InternalServerError", "param": None, "code": 500}}).encode()),
    "empty-400": answer("400 Bad Request", b""),
    "huge-400": answer("400 Bad Request", b'{"error": {"message": "' + b"x" * (1 << 20) + b'", "code": 400}}'),
    "long-message-400": vllm_error(400, "y" * 10_000, "BadRequestError"),
    "invalid-json-400": answer("400 Bad Request", b'{"error": {"message": "cut sh'),
    "non-utf8-400": answer("400 Bad Request", b'{"error": {"message": "\xff\xfe bad \xc3"}}'),
    "nested-400": answer("400 Bad Request", b"[" * 50_000 + b"]" * 50_000),
    "surrogate-400": answer("400 Bad Request", b'{"error": {"message": "bad \\ud800 value", "code": 400}}'),
    "array-400": answer("400 Bad Request", b'["not", "an", "object"]'),
    "chunked-400": (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
                    + chunk(b'{"error": {"message": "in two ') + chunk(b'chunks", "code": 400}}') + b"0\r\n\r\n"),
    "slow-400": (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 30\r\n\r\n",
                 (3.0, b'{"error": {"message": "late"}}')),
    # A whole answer whose headers announce 200 bytes, then 10 of them, then the engine drops the connection.
    "cut-200": (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n{\"id\":\"cm",
                (0.2, CLOSE)),
    "html-200": answer("200 OK", b"<html><body>Sign in to continue</body></html>", b"text/html"),
    "empty-200": answer("200 OK", b""),
    "redirect-307": b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://elsewhere/\r\ncontent-length: 0\r\n\r\n",
    # Streams: vLLM ends a failed generation with an error event, then [DONE] (create_streaming_error_response).
    "stream-fails": SSE_HEAD + chunk(token_event("def")) + chunk(token_event(" f")) + chunk(
        b'data: {"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, '
        b'"code": 500}}\n\n') + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n",
    "stream-fails-in-one-read": SSE_HEAD + chunk(token_event("def") + b'data: {"error": {"message": "Internal '
                                                 b'server error", "type": "InternalServerError", "param": null, '
                                                 b'"code": 500}}\n\ndata: [DONE]\n\n') + b"0\r\n\r\n",
    "stream-fails-old-shape": SSE_HEAD + chunk(token_event("x")) + chunk(
        b'data: {"object": "error", "message": "Request failed; please retry", "type": "ServiceUnavailableError", '
        b'"param": null, "code": 503}\n\n') + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n",
    "stream-client-error": SSE_HEAD + chunk(token_event("x")) + chunk(
        b'data: {"error": {"message": "bad tool call", "type": "BadRequestError", "param": null, "code": 400}}\n\n')
    + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n",
    "stream-text-about-errors": SSE_HEAD + chunk(token_event('the \\"error\\" key')) + chunk(
        b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"sim-coder","choices":[],"usage":'
        b'{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}\n\n') + chunk(b"data: [DONE]\n\n")
    + b"0\r\n\r\n",
}


class ScriptedEngine:
    """Serves ANSWERS on a loopback port from a thread; `requests` counts what it was sent, by answer name."""

    def __init__(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests: dict[str, int] = {}
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"scripted-{self.port}")
        self._thread.start()
        assert self._ready.wait(10), "the scripted engine did not start"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader, writer) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                name = self._name_of(await reader.readexactly(length))
                self.requests[name] = self.requests.get(name, 0) + 1
                script = ANSWERS[name]
                for step in (script if isinstance(script, tuple) else (script,)):
                    delay, data = step if isinstance(step, tuple) else (0, step)
                    await asyncio.sleep(delay)
                    if data is CLOSE:
                        return
                    writer.write(data)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @staticmethod
    def _name_of(body: bytes) -> str:
        payload = json.loads(body)
        if "messages" in payload:
            return payload["messages"][-1]["content"]
        return payload["prompt"]

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
