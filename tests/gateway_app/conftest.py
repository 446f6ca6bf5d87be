"""The gateway in-process (uvicorn in a thread) in front of real simulator processes.

Tests are transactional: the gateway reads the database from its own threads, so it must
see committed rows (`audit_head`, tests/conftest.py).
"""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from openai import OpenAI

from apikeys.scopes import Scope
from tests.factories import make_key, make_member, make_tenant, make_user
from tests.gateway_app.helpers import EchoEngine, GatewayServer, SimulatorProcess, add_deployment, make_model_version

MODEL = "sim-coder"


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing():
    """Full-strength PBKDF2 for every test user would dominate these suites; it is not under test."""
    from django.test.utils import override_settings

    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture(scope="session")
def simulators():
    """Factory: start `python -m simulator` processes serving MODEL; all stopped at the end."""
    started: list[SimulatorProcess] = []

    def start(*args: str, model: str = MODEL) -> SimulatorProcess:
        process = SimulatorProcess.start(model, *args)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture(scope="session")
def fast_sims(simulators):
    """Two quick engines shared by the tests that do not kill one."""
    return [simulators("--decode-ms-per-token", "2", "--prefill-ms-per-token", "0.01") for _ in range(2)]


@pytest.fixture
def gateway(audit_head, settings):
    """Factory: a running gateway (config overrides as keywords); stopped after the test."""
    servers: list[GatewayServer] = []

    def start(**overrides) -> GatewayServer:
        server = GatewayServer.start(**overrides)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def tenant_a(audit_head):
    return make_tenant("tenant-a")


@pytest.fixture
def tenant_b(audit_head):
    return make_tenant("tenant-b")


def inference_key(tenant, *, user=None, scopes=(Scope.INFERENCE,), **fields) -> SimpleNamespace:
    """A key for the gateway: raw secret plus its ApiKey row."""
    minted = make_key(tenant, user, scopes=scopes, **fields)
    return SimpleNamespace(raw=minted.raw, api_key=minted.api_key)


@pytest.fixture
def alice(tenant_a):
    user = make_member(tenant_a, "owner", make_user("alice"))
    return SimpleNamespace(user=user, tenant=tenant_a, key=inference_key(tenant_a, user=user))


@pytest.fixture
def bob(tenant_b):
    user = make_member(tenant_b, "owner", make_user("bob"))
    return SimpleNamespace(user=user, tenant=tenant_b, key=inference_key(tenant_b, user=user))


@pytest.fixture
def shared_pool(audit_head, fast_sims):
    """A shared deployment of MODEL with both fast engines ready (a StarCoder2-family model: `suffix` renders)."""
    version = make_model_version(MODEL, family="starcoder2")
    return add_deployment(version, tenant=None, name="shared-sim", urls=[s.url for s in fast_sims])


@pytest.fixture
def echo(audit_head):
    """A shared pool of MODEL on one EchoEngine, which keeps the bodies it received."""
    engine = EchoEngine(MODEL)
    add_deployment(make_model_version(MODEL), tenant=None, name="echo", urls=[engine.url])
    yield engine
    engine.stop()


@pytest.fixture
def scripted_engine(audit_head):
    """A ScriptedEngine (tests/gateway_app/scripted_engine.py) as the only engine of a platform deployment of
    MODEL: each request's prompt names how it answers."""
    from tests.gateway_app.scripted_engine import ScriptedEngine

    engine = ScriptedEngine()
    add_deployment(make_model_version(MODEL), tenant=None, name="scripted", urls=[engine.url])
    yield engine
    engine.stop()


@pytest.fixture
def served(gateway, alice, shared_pool):
    """A gateway serving the shared pool, with alice's client ready."""
    server = gateway()
    server.wait_until_serving(alice.key.raw, MODEL)
    return SimpleNamespace(gateway=server, client=client_for(server, alice.key.raw), alice=alice, pool=shared_pool)


def client_for(server: GatewayServer, raw_key: str, **options) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key=raw_key, max_retries=0, timeout=options.pop("timeout", 30),
                  **options)


def wait_for(condition, timeout: float, interval: float = 0.02):
    """Poll until condition() is truthy; return its value, or None after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    return None
