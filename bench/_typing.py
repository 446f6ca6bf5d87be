"""An editor typing: one completion request per keystroke, each on its own connection, streamed, and what
became of each (completed, superseded, failed) — for the supersession tests and `python -m bench typing`."""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import httpx

SESSION, INTERACTIVE, FILE = "x-switchyard-session", "x-switchyard-interactive", "x-switchyard-file"


@dataclass
class Keystroke:
    """One request of the typing: when it went out and what came back."""

    index: int
    sent_at: float = 0.0
    first_token_at: float | None = None
    ended_at: float = 0.0
    status: int = 0
    tokens: int = 0  # text chunks received
    finish_reason: str | None = None
    error: dict | None = None  # the error object (a 4xx body, or a stream's error event)
    request_id: str = ""
    exception: str = ""

    @property
    def completed(self) -> bool:
        return self.status == 200 and self.finish_reason is not None and self.error is None

    @property
    def superseded(self) -> bool:
        return bool(self.error) and self.error.get("code") == "superseded"

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.sent_at


@dataclass
class Typist:
    """Sends `prompt + text[:i]` for each keystroke i, `gap` seconds apart (threads: requests overlap)."""

    url: str
    key: str
    model: str
    headers: dict = field(default_factory=dict)
    max_tokens: int = 64
    stream: bool = True
    endpoint: str = "/v1/completions"
    timeout: float = 120.0

    def type(self, prompt: str, text: str, gap: float, start: float | None = None) -> list[Keystroke]:
        strokes = [Keystroke(i) for i in range(len(text))]
        # Clients made beforehand (building one costs milliseconds): each keystroke goes out on time.
        clients = [httpx.Client(timeout=self.timeout) for _ in strokes]
        threads = []
        began = start if start is not None else time.monotonic()
        try:
            for i, stroke in enumerate(strokes):
                delay = began + i * gap - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                thread = threading.Thread(target=self.send, args=(clients[i], prompt + text[:i + 1], stroke),
                                          daemon=True)
                thread.start()
                threads.append(thread)
            for thread in threads:
                thread.join(self.timeout + 10)
        finally:
            for client in clients:
                client.close()
        return strokes

    def body(self, prompt: str) -> dict:
        if self.endpoint == "/v1/chat/completions":
            return {"model": self.model, "messages": [{"role": "user", "content": prompt}],
                    "max_tokens": self.max_tokens, "stream": self.stream}
        return {"model": self.model, "prompt": prompt, "max_tokens": self.max_tokens, "stream": self.stream}

    def send(self, client: httpx.Client, prompt: str, stroke: Keystroke) -> None:
        """One request on `client`, a connection of its own (as an editor's request to a gateway)."""
        headers = {"authorization": f"Bearer {self.key}", **self.headers}
        stroke.sent_at = time.monotonic()
        try:
            with client.stream("POST", self.url + self.endpoint, json=self.body(prompt), headers=headers) as answer:
                stroke.status = answer.status_code
                stroke.request_id = answer.headers.get("x-request-id", "")
                if answer.status_code != 200 or not self.stream:
                    self._whole(answer.read(), stroke)
                else:
                    for line in answer.iter_lines():
                        self._event(line, stroke)
        except httpx.HTTPError as error:
            stroke.exception = f"{type(error).__name__}: {error}"
        stroke.ended_at = time.monotonic()

    def _whole(self, raw: bytes, stroke: Keystroke) -> None:
        stroke.first_token_at = time.monotonic()
        try:
            body = json.loads(raw)
        except ValueError:
            stroke.exception = f"not JSON: {raw[:200]!r}"
            return
        if "error" in body:
            stroke.error = body["error"]
            return
        stroke.finish_reason = body["choices"][0].get("finish_reason")
        stroke.tokens = (body.get("usage") or {}).get("completion_tokens", 0)

    def _event(self, line: str, stroke: Keystroke) -> None:
        if not line.startswith("data: ") or line == "data: [DONE]":
            return
        event = json.loads(line[6:])
        if "error" in event:
            stroke.error = event["error"]
            return
        for choice in event.get("choices") or ():
            if choice.get("text") or (choice.get("delta") or {}).get("content"):
                stroke.tokens += 1
                if stroke.first_token_at is None:
                    stroke.first_token_at = time.monotonic()
            if choice.get("finish_reason"):
                stroke.finish_reason = choice["finish_reason"]


def running_sampler(metrics_url: str, interval: float = 0.05):
    """Samples an engine's `vllm:num_requests_running` until stopped: (stop(), samples [(t, running)])."""
    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def sample() -> None:
        with httpx.Client(timeout=5) as client:
            while not stop.is_set():
                try:
                    samples.append((time.monotonic(), metric(client.get(metrics_url).text,
                                                             "vllm:num_requests_running")))
                except httpx.HTTPError:
                    pass
                stop.wait(interval)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()

    def finish() -> list[tuple[float, float]]:
        stop.set()
        thread.join(10)
        return samples

    return finish


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of a series' values in a Prometheus exposition (every sample matching `labels`)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        series = head.split("{", 1)[0]
        if series not in (name, name + "_total"):
            continue
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total
