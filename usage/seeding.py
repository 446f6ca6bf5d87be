"""Synthetic usage for demos and benchmarks: tenants, model versions, instances and N raw events.

Raw events are generated inside PostgreSQL (`seed_sql`, one INSERT … SELECT per batch; bulk_create
elsewhere), so ten million take minutes. Fleet rows are synthetic history — stopped instances of zero-replica
deployments — written directly, because the fleet services would ask workers to start real engines.
"""
import math
import random
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.apps import apps
from django.db import connection

from audit.actor import Actor
from models_registry.models import Model, ModelVersion
from tenants.models import Tenant
from usage.models import Outcome, UsageEvent

ACTOR = Actor.system("seed_usage")
OUTCOMES = [Outcome.OK] * 92 + [Outcome.CLIENT_ERROR] * 3 + [Outcome.RATE_LIMITED] * 2 + [
    Outcome.UPSTREAM_ERROR, Outcome.TIMEOUT, Outcome.CANCELLED]
STATUS = {Outcome.OK: 200, Outcome.CLIENT_ERROR: 400, Outcome.RATE_LIMITED: 429, Outcome.UPSTREAM_ERROR: 502,
          Outcome.TIMEOUT: 504, Outcome.CANCELLED: 499}
COLUMNS = ("request_id", "occurred_at", "tenant_id", "api_key_prefix", "model_name", "model_version_id",
           "instance_id", "endpoint", "status_code", "outcome", "prompt_tokens", "completion_tokens", "cached_tokens",
           "ttft_ms", "latency_ms", "redactions", "cache_hit", "fallback_used", "streamed")


@dataclass(frozen=True)
class Target:
    """Where a synthetic request goes: tenant, key prefix, model version and serving instance."""

    tenant_id: int
    key: str
    version: ModelVersion
    instance_id: int | None


def seed_tenants(count: int) -> list[Tenant]:
    from tenants.services import create_tenant

    tenants = []
    for index in range(1, count + 1):
        slug = f"seed-{index}"
        tenant = Tenant.objects.filter(slug=slug).first()
        tenants.append(tenant or create_tenant(slug=slug, name=f"Seed tenant {index}", actor=ACTOR))
    return tenants


def seed_versions() -> list[ModelVersion]:
    from models_registry.services import create_version, register_model

    versions = []
    for name, quantization in (("seed-coder-7b", "awq"), ("seed-coder-32b", "fp8")):
        model = Model.objects.filter(name=name).first() or register_model(name=name, actor=ACTOR)
        version = model.versions.filter(version="1").first() or create_version(
            model=model, version="1", artifact_uri=f"hf://seed/{name}@main", quantization=quantization, actor=ACTOR)
        versions.append(version)
    return versions


def seed_instances(tenants, versions, start: datetime, end: datetime) -> dict[int, int]:
    """A shared H100 pool per version plus a dedicated A100 for the first tenant: version id → instance id."""
    if not apps.is_installed("fleet"):
        return {}
    deployment_model = apps.get_model("fleet", "Deployment")
    placed = {}
    for version, gpu, tp in zip(versions, ("H100", "H100"), (1, 2)):
        pool, _ = deployment_model.objects.get_or_create(
            tenant=None, name=f"seed-pool-{version.pk}",
            defaults={"model_version": version, "gpu_type": gpu, "tensor_parallel_size": tp,
                      "min_replicas": 0, "max_replicas": 0, "runtime_backend": "simulator"})
        placed[version.pk] = _history_instance(pool, start, end).pk
    dedicated, _ = deployment_model.objects.get_or_create(
        tenant=tenants[0], name="seed-dedicated",
        defaults={"model_version": versions[0], "gpu_type": "A100-80G", "min_replicas": 0, "max_replicas": 0,
                  "runtime_backend": "simulator"})
    placed["dedicated"] = _history_instance(dedicated, start, end).pk
    return placed


def _history_instance(deployment, start, end):
    """One stopped instance covering the seeded period (re-seeding reuses it instead of doubling cost)."""
    return deployment.instances.first() or deployment.instances.create(state="stopped", starting_at=start,
                                                                       ready_at=start + timedelta(minutes=1),
                                       stopped_at=end)


def targets(tenants, versions, placed: dict, keys_per_tenant: int) -> list[Target]:
    """Every (tenant, key, version) combination; the first tenant's first version runs on its own GPUs."""
    result = []
    for t_index, tenant in enumerate(tenants):
        for k in range(keys_per_tenant):
            for version in versions:
                dedicated = t_index == 0 and version == versions[0] and "dedicated" in placed
                instance = placed["dedicated"] if dedicated else placed.get(version.pk)
                result.append(Target(tenant.pk, f"sy_seed{t_index}k{k}", version, instance))
    return result


def insert_events(count: int, pool: list[Target], start: datetime, end: datetime, *, batch: int = 50_000,
                  progress=None) -> int:
    """Insert `count` events spread over [start, end), busier tenants first (Zipf-like weights)."""
    run = secrets.token_hex(4)
    if connection.vendor == "postgresql":
        from usage.seed_sql import generate

        return generate(count, pool, start, end, run=run, batch=batch, progress=progress)
    rng = random.Random(20261130)
    weights = [1 / (1 + index // 2) for index in range(len(pool))]
    span = (end - start).total_seconds()
    written = 0
    while written < count:
        size = min(batch, count - written)
        chosen = rng.choices(pool, weights=weights, k=size)
        rows = [_row(rng, run, written + i, chosen[i], start, span) for i in range(size)]
        _write(rows)
        written += size
        if progress:
            progress(written)
    return written


def _row(rng: random.Random, run: str, index: int, target: Target, start: datetime, span: float) -> tuple:
    outcome = rng.choice(OUTCOMES)
    ok = outcome == Outcome.OK
    prompt = int(rng.lognormvariate(6.5, 0.8)) if outcome != Outcome.CLIENT_ERROR else 0
    completion = int(rng.lognormvariate(4.5, 0.9)) if ok else 0
    cached = int(prompt * rng.random() * 0.7)
    ttft = rng.lognormvariate(math.log(180), 0.6) if ok else None
    latency = (ttft or 0) + completion * rng.uniform(8, 25) + rng.uniform(5, 40)
    served = target.instance_id if outcome not in (Outcome.CLIENT_ERROR, Outcome.RATE_LIMITED) else None
    moment = start + timedelta(seconds=rng.random() * span)
    return (f"seed-{run}-{index}", moment, target.tenant_id, target.key, target.version.model.name, target.version.pk,
            served, rng.choice(("completions", "chat")), STATUS[outcome], outcome, prompt, completion, cached,
            ttft, latency, 0, rng.random() < 0.03, rng.random() < 0.01, rng.random() < 0.6)


def _write(rows: list[tuple]) -> None:
    UsageEvent.objects.bulk_create([UsageEvent(**dict(zip(COLUMNS, row))) for row in rows], batch_size=2000)
