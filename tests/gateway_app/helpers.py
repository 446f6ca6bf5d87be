"""Processes and rows the gateway tests need: simulator engines, an in-process gateway, a fleet."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass

import httpx
import uvicorn
from django.db import transaction
from django.utils import timezone

from audit.services import record_event
from tests.factories import SYSTEM
from tests.processes import free_port, start_simulator


@dataclass
class SimulatorProcess:
    """A real `python -m simulator` engine in its own process group (tests/processes.py)."""

    proc: subprocess.Popen
    url: str

    @classmethod
    def start(cls, model: str, *args: str) -> "SimulatorProcess":
        return cls(*start_simulator(model, *args))

    def stop(self) -> None:
        """SIGKILL the group: also how a test makes an engine die under load."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


class GatewayServer:
    """The gateway app served by gateway.server in a thread of the test process (same settings and DB)."""

    def __init__(self, app, server, thread: threading.Thread, port: int):
        self.app, self.server, self.thread = app, server, thread
        self.url = f"http://127.0.0.1:{port}"

    @classmethod
    def start(cls, **overrides) -> "GatewayServer":
        from gateway.__main__ import body_limits
        from gateway.app import build_app
        from gateway.server import HttpServer

        overrides.setdefault("usage_flush_seconds", 0.2)
        # A spool of its own: nothing one test's gateway spooled is replayed into another test's database.
        overrides.setdefault("usage_spool_dir", tempfile.mkdtemp(prefix="switchyard-test-spool-"))
        run = uuid.uuid4().hex[:8]
        overrides.setdefault("limits_prefix", f"sy:test:{run}")  # counters of this test only
        overrides.setdefault("dedup_prefix", f"sy:test:{run}:dedup")  # and its cached answers
        app = build_app(**overrides)
        port = free_port()
        server = HttpServer(app, host="127.0.0.1", port=port, install_signals=False,  # as `python -m gateway`
                            **body_limits())
        thread = threading.Thread(target=server.run, daemon=True, name=f"gateway-{port}")
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the gateway did not start")
            time.sleep(0.01)
        return cls(app, server, thread, port)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        shutil.rmtree(self.app.config.usage_spool_dir, ignore_errors=True)

    def models(self, raw_key: str) -> httpx.Response:
        return httpx.get(self.url + "/v1/models", headers={"authorization": f"Bearer {raw_key}"}, timeout=10)

    def wait_until_serving(self, raw_key: str, model: str, timeout: float = 5.0) -> None:
        """Until the key lists the model (the snapshot caught up with the rows just written)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            response = self.models(raw_key)
            if response.status_code == 200 and model in {m["id"] for m in response.json()["data"]}:
                return
            time.sleep(0.05)
        raise AssertionError(f"the gateway never served {model}: {response.status_code} {response.text}")

    def wait_synced(self, timeout: float = 5.0) -> None:
        """Until the gateway's snapshot carries the database's current version marker."""
        from gateway.config.snapshot_loader import version_marker

        target = version_marker()
        deadline = time.monotonic() + timeout
        while self.app.state.snapshot.version != target:
            if time.monotonic() > deadline:
                raise AssertionError("the gateway's snapshot did not catch up")
            time.sleep(0.02)

    def post(self, path: str, raw_key: str | None, body, **kwargs) -> httpx.Response:
        headers = kwargs.pop("headers", {})
        if raw_key is not None:
            headers["authorization"] = f"Bearer {raw_key}"
        send = {"json": body} if isinstance(body, dict) else {"content": body}
        return httpx.post(self.url + path, headers=headers, timeout=kwargs.pop("timeout", 30), **send, **kwargs)


def make_model_version(name: str, **fields):
    """A version row (draft: SQLite's flush between transactional tests may delete only drafts)."""
    from models_registry.models import Model, ModelVersion

    model, _ = Model.objects.get_or_create(name=name)
    return ModelVersion.objects.create(model=model, version=f"v{ModelVersion.objects.count() + 1}",
                                       artifact_uri=f"tests/{name}", **fields)


def add_deployment(version, *, tenant, name: str, urls: list[str], **fields):
    """An active deployment with one ready instance per URL, committed and audited like the service does."""
    from fleet.models import BuiltinRuntime, Deployment, Instance
    from fleet.states import InstanceState

    fields.setdefault("runtime_backend", BuiltinRuntime.SIMULATOR)
    with transaction.atomic():
        deployment = Deployment.objects.create(tenant=tenant, name=name, model_version=version, **fields)
        record_event(actor=SYSTEM, action="fleet.deployment.create", tenant=tenant, target=deployment)
        for url in urls:
            Instance.objects.create(deployment=deployment, state=InstanceState.READY, endpoint_url=url,
                                    ready_at=timezone.now())
    return deployment


def usage_rows(**filters) -> list:
    from usage.models import UsageEvent

    return list(UsageEvent.objects.filter(**filters).order_by("occurred_at"))


class EchoEngine:
    """A stand-in engine for tests only: answers every completion and keeps the bodies it received.

    The simulator does not echo prompts; tests that must see what reached the engine use this.
    """

    def __init__(self, model: str):
        self.model = model
        self.bodies: list[dict] = []
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(self._app, host="127.0.0.1", port=port, log_level="warning",
                                                    lifespan="off", access_log=False, interface="asgi3"))
        self.thread = threading.Thread(target=self.server.run, daemon=True, name=f"echo-{port}")
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)

    async def _app(self, scope, receive, send) -> None:
        import json

        body = await read_request(receive)
        if scope["path"] == "/health":
            answer = b"{}"
        else:
            self.bodies.append(json.loads(body))
            answer = json.dumps({"id": "cmpl-echo", "object": "text_completion", "model": self.model,
                                 "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}],
                                 "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer})

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


async def read_request(receive) -> bytes:
    """An ASGI request's whole body."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body
