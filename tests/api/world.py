"""A populated world for the whole-API suites (schemathesis, bad input): every kind of object, every kind of caller.

Built with the real services, in the test's transaction. `APP` is the Django WSGI app the suites call in-process.
"""
import json
from contextlib import contextmanager
from datetime import timedelta
from types import SimpleNamespace

from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer

from apikeys.models import ApiKey
from apikeys.scopes import Scope
from audit.actor import Actor
from audit.models import AuditEvent
from fleet.models import BuiltinRuntime, Deployment, Instance
from fleet.services import create_deployment
from models_registry.models import Model, ModelVersion
from models_registry.services import create_version, publish_version, register_model
from quotas.models import QuotaPolicy
from quotas.services import create_quota_policy
from tenants.models import Membership
from tenants.roles import Role
from tests.factories import make_key, make_member, make_user
from usage.rollups import roll_up_day, roll_up_hours
from usage.services import record_usage_batch, set_budget_state, set_gpu_price

SYSTEM = Actor.system("api-suites")
APP = WSGIHandler()


def openapi_document() -> dict:
    """The schema /api/schema/ serves, as plain JSON."""
    return json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))


@contextmanager
def one_connection():
    """Django closes the database connection after each request; the test's transaction must survive it."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def build_world(alice, charlie) -> SimpleNamespace:
    """Tenant A (alice's) with one object of every kind, and a key for each kind of caller."""
    tenant = alice.tenant
    dev = make_member(tenant, Role.DEVELOPER, make_user("dev"))
    auditor = make_member(tenant, Role.AUDITOR, make_user("aud"))
    callers = {
        "platform": make_key(None, charlie.user).raw,
        "owner": alice.key,
        "developer": make_key(tenant, dev, role=Role.DEVELOPER).raw,
        "dev-service": make_key(tenant, None, role=Role.DEVELOPER, name="ci service").raw,
        "auditor": make_key(tenant, auditor, role=Role.AUDITOR, scopes=(Scope.AUDIT_READ,)).raw,
        "inference": make_key(tenant, dev, role=Role.DEVELOPER, scopes=(Scope.INFERENCE,)).raw,
    }
    dev_key = ApiKey.objects.filter(user=dev).first()
    create_quota_policy(tenant=tenant, api_key=dev_key, requests_per_minute=60, actor=SYSTEM)
    create_quota_policy(tenant=tenant, user=dev, tokens_per_minute=1000, actor=SYSTEM)
    version = _registry()
    _fleet(tenant, version)
    _usage(tenant, version)
    return SimpleNamespace(callers=callers, ids=_ids(tenant), tenant=tenant, version=version)


def _registry() -> ModelVersion:
    model = register_model(name="fuzz-coder", actor=SYSTEM)
    draft = create_version(model=model, version="v1", artifact_uri="fuzz-coder", actor=SYSTEM)
    published = publish_version(draft, actor=SYSTEM)
    create_version(model=model, version="v2", artifact_uri="fuzz-coder", engine_args={"max_num_seqs": 4}, actor=SYSTEM)
    return published


def _fleet(tenant, version) -> None:
    deployment = create_deployment(tenant=tenant, name="fuzz", model_version=version, actor=SYSTEM,
                                   runtime_backend=BuiltinRuntime.SIMULATOR, gpu_type="cpu")
    create_deployment(tenant=None, name="shared-fuzz", model_version=version, actor=SYSTEM,
                      runtime_backend=BuiltinRuntime.SIMULATOR)
    Instance.objects.create(deployment=deployment, state="ready", endpoint_url="http://127.0.0.1:9/", port=9,
                            runtime_handle={"pid": 1})
    Instance.objects.create(deployment=deployment)


def _usage(tenant, version) -> None:
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    events = [{"request_id": f"fuzz-{n}", "occurred_at": now - timedelta(hours=n), "tenant": tenant,
               "model_version_id": version.pk, "api_key_prefix": "sy_fuzz", "status_code": 200, "outcome": "ok",
               "prompt_tokens": 100, "completion_tokens": 20, "latency_ms": 400.0, "ttft_ms": 80.0}
              for n in range(1, 4)]
    record_usage_batch(events)
    roll_up_hours(now - timedelta(hours=4), now, now=timezone.now())
    roll_up_day(now.replace(hour=0) - timedelta(days=1), now=timezone.now())
    set_gpu_price("cpu", "0.0500", actor=SYSTEM)
    set_budget_state(tenant, over_budget=False, reason="", tokens=360, cost_usd="0.01", actor=SYSTEM)


def _ids(tenant) -> dict[str, list[int]]:
    """Existing ids by the path segment before `{id}`: a generated id is mapped onto one of these."""
    return {
        "keys": list(ApiKey.objects.filter(tenant=tenant).values_list("pk", flat=True)),
        "members": list(Membership.objects.filter(tenant=tenant).values_list("pk", flat=True)),
        "quotas": list(QuotaPolicy.objects.filter(tenant=tenant).values_list("pk", flat=True)),
        "models": list(Model.objects.values_list("pk", flat=True)),
        "versions": list(ModelVersion.objects.values_list("pk", flat=True)),
        "deployments": list(Deployment.objects.values_list("pk", flat=True)),
        "instances": list(Instance.objects.values_list("pk", flat=True)),
        "events": list(AuditEvent.objects.order_by("-seq").values_list("seq", flat=True)[:5]),
    }
