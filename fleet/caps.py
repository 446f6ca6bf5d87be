"""Platform caps on how much one deployment, and one tenant, may ask for.

Checked whenever a deployment is created or scaled (the API and the console both go through
fleet.services), before anything is planned. A tenant's deployments count with their
`max_replicas` — what they may grow to — so no later scale-up or autoscaling can pass the quota.
A change that does not grow a deployment never fails a cap, so a tenant over a lowered quota can
still scale down.
"""
from django.conf import settings

from fleet.models import Deployment, DeploymentStatus

CPU_GPU_TYPES = frozenset({"", "cpu"})


def gpus_of(max_replicas: int, deployment) -> int:
    """GPUs a deployment may hold: replicas × tensor × pipeline parallel, none on CPU."""
    if deployment.gpu_type.strip().lower() in CPU_GPU_TYPES:
        return 0
    return max_replicas * deployment.tensor_parallel_size * deployment.pipeline_parallel_size


def check_caps(deployment, errors: dict) -> None:
    """Add an error naming the limit for every cap the deployment's spec would exceed."""
    stored = Deployment.objects.filter(pk=deployment.pk).first() if deployment.pk else None
    if stored is not None and deployment.max_replicas <= stored.max_replicas \
            and gpus_of(deployment.max_replicas, deployment) <= gpus_of(stored.max_replicas, stored):
        return
    _check_per_deployment(deployment, errors)
    if deployment.tenant_id is not None and not errors.keys() & {"min_replicas", "max_replicas"}:
        _check_tenant_quota(deployment, errors)


def _check_per_deployment(deployment, errors: dict) -> None:
    cap = settings.SWITCHYARD_FLEET_MAX_REPLICAS_PER_DEPLOYMENT
    for name in ("min_replicas", "max_replicas"):
        if getattr(deployment, name) > cap:
            errors[name] = (f"At most {cap} replicas per deployment "
                            f"(the platform limit SWITCHYARD_FLEET_MAX_REPLICAS_PER_DEPLOYMENT).")


def _check_tenant_quota(deployment, errors: dict) -> None:
    from quotas.selectors import capacity_quota

    quota = capacity_quota(deployment.tenant)
    others = list(Deployment.objects.filter(tenant=deployment.tenant, status=DeploymentStatus.ACTIVE)
                  .exclude(pk=deployment.pk))
    instances = sum(d.max_replicas for d in others)
    if instances + deployment.max_replicas > quota.max_instances:
        errors["max_replicas"] = _over(deployment.tenant, "instances", quota.max_instances, quota.instances_source,
                                       instances, max(0, quota.max_instances - instances), "max_replicas")
        return
    gpus = sum(gpus_of(d.max_replicas, d) for d in others)
    wanted = gpus_of(deployment.max_replicas, deployment)
    if gpus + wanted > quota.max_gpus:
        errors["max_replicas"] = _over(deployment.tenant, "GPUs", quota.max_gpus, quota.gpus_source, gpus,
                                       max(0, quota.max_gpus - gpus), "GPUs (max_replicas × parallel sizes)")


def _over(tenant, what: str, limit: int, source: str, used: int, left: int, this: str) -> str:
    return (f"Tenant {tenant.slug} may hold at most {limit} {what} ({source}); its other deployments may "
            f"already hold {used}, so this one can have at most {left} {this}.")


def second_set_problem(deployment, extra: int) -> str | None:
    """Why the tenant's quota has no room for `extra` more engines of this deployment (a rollout's new version,
    run beside the old one until promotion), or None."""
    if deployment.tenant_id is None:
        return None
    from quotas.selectors import capacity_quota

    quota = capacity_quota(deployment.tenant)
    active = list(Deployment.objects.filter(tenant=deployment.tenant, status=DeploymentStatus.ACTIVE))
    instances = sum(d.max_replicas for d in active)
    if instances + extra > quota.max_instances:
        return (f"A rollout runs {extra} more engine(s) until it is promoted; tenant {deployment.tenant.slug} may "
                f"hold at most {quota.max_instances} instances ({quota.instances_source}) and its deployments may "
                f"already hold {instances}.")
    gpus = sum(gpus_of(d.max_replicas, d) for d in active)
    wanted = gpus_of(extra, deployment)
    if gpus + wanted > quota.max_gpus:
        return (f"A rollout needs {wanted} more GPU(s) until it is promoted; tenant {deployment.tenant.slug} may "
                f"hold at most {quota.max_gpus} GPUs ({quota.gpus_source}) and its deployments may already hold "
                f"{gpus}.")
    return None
