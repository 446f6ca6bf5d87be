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

    def __init__(self, app, server, thread: threading.Thread, port: int, metrics_port: int):
        self.app, self.server, self.thread = app, server, thread
        self.url = f"http://127.0.0.1:{port}"
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"  # its own listener, as `python -m gateway`

    @classmethod
    def start(cls, **overrides) -> "GatewayServer":
        from gateway.__main__ import body_limits, metrics_listener_socket, metrics_server
        from gateway.app import build_app
        from gateway.server import HttpServer

        overrides.setdefault("usage_flush_seconds", 0.2)
        # A spool of its own: nothing one test's gateway spooled is replayed into another test's database.
        overrides.setdefault("usage_spool_dir", tempfile.mkdtemp(prefix="switchyard-test-spool-"))
        # Keys scoped as an install of this test only: counters and cached answers start empty.
        overrides.setdefault("redis_scope", f"test-{uuid.uuid4().hex[:8]}")
        overrides.setdefault("redis_url", redis_url_for_tests())
        app = build_app(**overrides)
        port = free_port()
        server = HttpServer(app, host="127.0.0.1", port=port, install_signals=False,  # as `python -m gateway`
                            **body_limits())
        metrics_socket = metrics_listener_socket("127.0.0.1", 0)
        server.add_companion(metrics_server(app), [metrics_socket])
        thread = threading.Thread(target=server.run, daemon=True, name=f"gateway-{port}")
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the gateway did not start")
            time.sleep(0.01)
        return cls(app, server, thread, port, metrics_socket.getsockname()[1])

    def metrics(self, **headers) -> str:
        """The metrics listener's exposition (raises on an error status)."""
        response = httpx.get(self.metrics_url, headers=headers, timeout=10)
        response.raise_for_status()
        return response.text

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


_session_redis: list = []  # a redis-server this test session started, when no other answered


def redis_url_for_tests() -> str:
    """The gateway's Redis in tests: the settings' (REDIS_URL in CI), else a local one on 6379 (db 14),
    else a redis-server of this session's own on a free port (stopped at exit), else none."""
    from django.conf import settings

    from tests.gateway.ratelimit_helpers import redis_url

    found = settings.SWITCHYARD_GATEWAY_REDIS_URL or redis_url()
    if found or shutil.which("redis-server") is None:
        return found or ""
    if not _session_redis:
        import atexit

        import redis

        from bench._procs import stop

        port = free_port()
        proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no"], stdout=subprocess.DEVNULL, start_new_session=True)
        atexit.register(stop, proc)
        url, deadline = f"redis://127.0.0.1:{port}/0", time.monotonic() + 20
        while not _pings(redis.Redis.from_url(url)) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        _session_redis.append(url)
    return _session_redis[0]


def _pings(client) -> bool:
    import redis

    try:
        return client.ping()
    except redis.ConnectionError:
        return False
    finally:
        client.close()


def limits_prefix(server: "GatewayServer") -> str:
    """`sy:<scope>:rl`: where this test gateway keeps its counters."""
    from controlplane.redis_keys import LIMITS, part_prefix

    return part_prefix(server.app.config.redis_scope, LIMITS)


def make_model_version(name: str, *, family: str = "other", **fields):
    """A version row (draft: SQLite's flush between transactional tests may delete only drafts); `family`
    names the model's family when this creates the model (a coder family renders fill-in-the-middle)."""
    from models_registry.models import Model, ModelVersion

    model, _ = Model.objects.get_or_create(name=name, defaults={"family": family})
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


def generous_key(tenant) -> str:
    """A raw service key whose tenant and key limits are the largest a policy accepts: a burst is never refused."""
    from apikeys.scopes import Scope
    from apikeys.services import create_api_key
    from quotas.models import LIMIT_BOUNDS, QuotaPolicy
    from quotas.services import create_quota_policy, update_quota_policy

    generous = {name: LIMIT_BOUNDS[name] for name in ("requests_per_minute", "tokens_per_minute",
                                                      "max_concurrent_requests")}
    update_quota_policy(QuotaPolicy.objects.get(tenant=tenant, api_key=None, user=None), actor=SYSTEM, **generous)
    minted = create_api_key(tenant=tenant, name="burst", scopes=[Scope.INFERENCE], actor=SYSTEM)
    create_quota_policy(tenant=tenant, api_key=minted.api_key, actor=SYSTEM, **generous)
    return minted.raw


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
