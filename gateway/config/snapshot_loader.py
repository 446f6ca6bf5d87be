"""Building a `Snapshot` and looking up keys with the ORM. Sync code: call it in a thread.

Nothing here runs on the request path except `load_key`, once per unknown key hash, and
that one also in a worker thread behind the key cache.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import time
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import Count, Max, Q

from gateway.config.snapshot import (
    DEFAULT_POLICY,
    DEFAULT_REDACTION_MODE,
    KeyInfo,
    Limits,
    Pool,
    Snapshot,
    TenantInfo,
    Upstream,
)


def version_marker() -> tuple:
    """A cheap tuple that changes whenever anything the snapshot holds may have changed.

    Every configuration write appends to the audit chain (seq moves); instance state changes
    are observed state, not audited, so their timestamps and the ready count are added.
    """
    from audit.models import AuditChainHead
    from fleet.models import Instance
    from fleet.states import InstanceState

    close_old_connections()  # a long-lived thread must not keep a broken or stale connection
    seq = AuditChainHead.objects.filter(pk=1).values_list("seq", flat=True).first() or 0
    instances = Instance.objects.aggregate(
        ready=Count("pk", filter=Q(state=InstanceState.READY)), newest=Max("pk"),
        a=Max("ready_at"), b=Max("draining_at"), c=Max("stopped_at"), d=Max("failed_at"))
    return (seq, *(instances[name] for name in ("ready", "newest", "a", "b", "c", "d")))


def load_snapshot(version: tuple, default_user_rpm: int) -> Snapshot:
    """Read tenants, quota policies and routable pools into a new immutable Snapshot."""
    from fleet.install import install_id

    return load_sections(Snapshot(default_user_rpm=default_user_rpm, install_id=install_id()), SECTIONS, version)


SECTIONS = frozenset({"tenants", "policies", "pools"})


def load_sections(snapshot: Snapshot, sections, version: tuple) -> Snapshot:
    """A new Snapshot: `sections` read afresh, the rest kept from `snapshot` (the change bus reloads only
    what a change touched), every query of them in one consistent read (`_one_read`)."""
    with _one_read():
        return _read_sections(snapshot, sections, version)


@contextmanager
def _one_read():
    """Every query of a load sees the database as of one moment: PostgreSQL's REPEATABLE READ (READ COMMITTED,
    the default, gives each statement its own moment), a transaction in SQLite. A load reads the rollouts'
    weights, then the deployments and their engines; a blue-green switch committed between the two (B's
    engines serving, A's demoted, the weight at B) read half and half left a pool with no engine at all — the
    deployment's own version, A, had none serving yet, no weight said B — and the gateway answered 503s until
    the next reload (tests/rollouts/test_snapshot_during_a_switch.py). Inside a transaction someone else opened
    (a test's), that transaction's view stands."""
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def _read_sections(snapshot: Snapshot, sections, version: tuple) -> Snapshot:
    fields: dict[str, Any] = {"version": version, "loaded_at": time.monotonic(), "_pools_memo": {}, "_allowed_memo": {}}
    if "tenants" in sections:
        fields["tenants"] = MappingProxyType(_load_tenants())
    if "policies" in sections:
        tenant_policies, key_policies, user_policies = _load_policies()
        fields.update(tenant_policies=MappingProxyType(tenant_policies), key_policies=MappingProxyType(key_policies),
                      user_policies=MappingProxyType(user_policies))
    if "pools" in sections:
        fields["pools"] = pools = MappingProxyType(_load_pools())
        fields["fim_templates"] = MappingProxyType(_load_fim_templates(pools))
    return dataclasses.replace(snapshot, **fields)


def tenant_cache_salt(tenant_id: int) -> str:
    """A per-tenant secret that keeps tenants' prefix caches apart on shared pools."""
    message = f"switchyard-cache-salt:{tenant_id}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()[:32]


def _load_tenants() -> dict[int, TenantInfo]:
    from tenants.models import Tenant, TenantStatus
    from usage.models import BudgetState

    # Entering and leaving "over budget" is audited, so the version marker moves with it.
    over = dict(BudgetState.objects.filter(over_budget=True).values_list("tenant_id", "reason"))
    return {t.pk: TenantInfo(id=t.pk, slug=t.slug, active=t.status == TenantStatus.ACTIVE,
                             redaction_mode=t.redaction_mode or DEFAULT_REDACTION_MODE,
                             cache_salt=tenant_cache_salt(t.pk), over_budget=over.get(t.pk),
                             cancel_superseded=t.cancel_superseded)
            for t in Tenant.objects.all()}


def _load_policies() -> tuple[dict, dict, dict]:
    from quotas.models import QuotaPolicy

    by_tenant, by_key, by_user = {}, {}, {}
    for policy in QuotaPolicy.objects.all():
        if policy.api_key_id:
            by_key[policy.api_key_id] = _limits(policy, "api_key", policy.api_key_id)
        elif policy.user_id:
            by_user[(policy.tenant_id, policy.user_id)] = _limits(policy, "user", policy.user_id)
        else:
            by_tenant[policy.tenant_id] = _limits(policy, "tenant", policy.tenant_id)
    return by_tenant, by_key, by_user


def _limits(policy, level: str, subject_id: int) -> Limits:
    money = policy.monthly_budget_usd
    return Limits(
        level=level, subject_id=subject_id, requests_per_minute=policy.requests_per_minute,
        tokens_per_minute=policy.tokens_per_minute, max_concurrent_requests=policy.max_concurrent_requests,
        monthly_token_budget=policy.monthly_token_budget,
        monthly_budget_usd=float(money) if money is not None else None,
        allowed_models=frozenset(policy.allowed_models) if policy.allowed_models else None)


def _load_pools() -> dict[str, tuple[Pool, ...]]:
    from fleet.models import Deployment, DeploymentStatus, InstanceRole
    from fleet.states import InstanceState
    from rollouts.selectors import routing_weights, sticky_modes

    weights, sticky = routing_weights(), sticky_modes()
    pools: dict[str, list[Pool]] = {}
    deployments = (Deployment.objects.filter(status=DeploymentStatus.ACTIVE)
                   .select_related("model_version__model", "scaling").prefetch_related("instances"))
    for deployment in deployments:
        # Warm instances are started and healthy but not routed until the fleet promotes them.
        ready = [i for i in deployment.instances.all()
                 if i.state == InstanceState.READY and i.role == InstanceRole.SERVING and i.endpoint_url]
        if deployment.pk not in weights:
            # Traffic not split: only the deployment's version serves, even before reconcile has moved the
            # other version's engines aside — a rollback or promotion takes effect with this snapshot.
            ready = [i for i in ready if (i.model_version_id or deployment.model_version_id)
                     == deployment.model_version_id]
        pool = _pool(deployment, ready)
        if deployment.pk in weights:
            pool = dataclasses.replace(pool, version_weights=weights[deployment.pk],
                                       sticky_by=sticky.get(deployment.pk, ""))
        pools.setdefault(deployment.model_version.model.name, []).append(pool)
    return {name: tuple(found) for name, found in pools.items()}


def _load_fim_templates(pools) -> dict:
    """Each served version's FIM template: its own, else its family's, else None (docs/fim.md)."""
    from models_registry.fim import TemplateError, template_for
    from models_registry.models import ModelVersion

    ids = {version for found in pools.values() for pool in found for version in _versions_of(pool)}
    templates = {}
    for row in ModelVersion.objects.filter(pk__in=ids).values("pk", "fim_template", "model__family"):
        try:
            templates[row["pk"]] = template_for(row["model__family"], row["fim_template"])
        except TemplateError:  # written around the service, which validates it: served without FIM
            templates[row["pk"]] = None
    return templates


def _versions_of(pool: Pool):
    yield pool.model_version_id
    yield from (version for version, _weight in pool.version_weights)
    yield from (upstream.model_version_id for upstream in pool.upstreams)


def _pool(deployment, ready_instances) -> Pool:
    upstreams = tuple(
        Upstream(instance_id=i.pk, url=i.endpoint_url.rstrip("/"), deployment_id=deployment.pk,
                 model_version_id=i.model_version_id or deployment.model_version_id,
                 shared=deployment.tenant_id is None)
        for i in ready_instances)
    return Pool(deployment_id=deployment.pk, tenant_id=deployment.tenant_id,
                model_version_id=deployment.model_version_id,
                policy=deployment.routing_policy or DEFAULT_POLICY,
                supports_priority=_supports_priority(deployment), upstreams=upstreams,
                fallback_model=deployment.fallback_model_name, wake_timeout=_wake_timeout(deployment))


def _wake_timeout(deployment) -> float | None:
    """How long a request may wait for the deployment to wake, when it can sleep at zero (else None)."""
    scaling = getattr(deployment, "scaling", None)
    if scaling is None or not scaling.enabled or deployment.min_replicas > 0:
        return None
    return float(scaling.wake_timeout_seconds)


def _supports_priority(deployment) -> bool:
    """Engines reject a non-zero `priority` unless started with priority scheduling."""
    if deployment.runtime_backend == "simulator":
        return (deployment.simulator_params or {}).get("scheduling_policy") == "priority"
    from models_registry.profiles import effective_engine_args

    return effective_engine_args(deployment.model_version).get("scheduling_policy") == "priority"


def load_key(key_hash: str) -> KeyInfo | None:
    """The key with this HMAC, or None. The one query a cold key costs."""
    from apikeys.models import ApiKey

    close_old_connections()
    row = (ApiKey.objects.filter(key_hash=key_hash)
           .values("pk", "prefix", "tenant_id", "user_id", "scopes", "expires_at", "revoked_at").first())
    if row is None:
        return None
    return KeyInfo(id=row["pk"], prefix=row["prefix"], tenant_id=row["tenant_id"], user_id=row["user_id"],
                   scopes=frozenset(row["scopes"] or ()), revoked=row["revoked_at"] is not None,
                   expires_at=row["expires_at"].timestamp() if row["expires_at"] else None)
