"""Console fixtures: the alice / bob / charlie trio plus tenant-A members with narrower roles.

alice owns tenant A, bob owns tenant B, charlie is platform staff; in tenant A dave is an
auditor, erin a developer and victor a viewer. Each tenant has a deployment with one instance.
"""
from types import SimpleNamespace

import pytest
from django.test import Client
from django.utils import timezone

from fleet.models import Deployment, Instance
from fleet.states import InstanceState
from tests.console.browser import ensure_chain_head
from tests.factories import make_key, make_member, make_tenant, make_user

PASSWORD = "correct horse battery 9"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def make_version(name: str = "console-coder", status: str = "published"):
    from models_registry.models import Model, ModelVersion

    model, _ = Model.objects.get_or_create(name=name)
    return ModelVersion.objects.create(model=model, version=f"v{ModelVersion.objects.count() + 1}",
                                       artifact_uri="console-coder", status=status, max_context=1024)


def make_deployment(tenant, version, name="coder"):
    deployment = Deployment.objects.create(tenant=tenant, name=name, model_version=version, runtime_backend="simulator")
    Instance.objects.create(deployment=deployment, state=InstanceState.READY, endpoint_url="http://127.0.0.1:9",
                            ready_at=timezone.now(), metrics={"num_requests_waiting": 2, "kv_cache_usage_perc": 0.25},
                            log_tail="engine started\nserving")
    return deployment


@pytest.fixture
def version_status(request):
    """Published; browser (transactional) tests use a draft: SQLite's trigger lets a flush delete only drafts."""
    return "draft" if request.node.get_closest_marker("browser") else "published"


@pytest.fixture
def world(request, db, version_status):
    if request.node.get_closest_marker("browser"):
        ensure_chain_head()  # the row every audited write locks (a transactional test's flush deleted the migration's)
    a, b = make_tenant("tenant-a"), make_tenant("tenant-b")
    version = make_version(status=version_status)
    people = {"alice": (a, "owner"), "bob": (b, "owner"), "dave": (a, "auditor"), "erin": (a, "developer"),
              "victor": (a, "viewer")}
    users = {name: make_member(tenant, role, make_user(name)) for name, (tenant, role) in people.items()}
    users["charlie"] = make_user("charlie", staff=True)
    users["nobody"] = make_user("nobody")
    keys = {"a": make_key(a, users["alice"]).api_key, "b": make_key(b, users["bob"]).api_key,
            "erin": make_key(a, users["erin"], role="developer", scopes=["inference"]).api_key}
    return SimpleNamespace(a=a, b=b, version=version, users=users, keys=keys,
                           dep_a=make_deployment(a, version, "coder-a"), dep_b=make_deployment(b, version, "coder-b"))


@pytest.fixture
def login(world):
    """Factory: a test client signed in as one of the world's users."""
    def client_for(name: str, **options) -> Client:
        client = Client(**options)
        client.force_login(world.users[name])
        return client
    return client_for
