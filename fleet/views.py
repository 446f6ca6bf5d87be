"""Frozen dictionaries of deployments and instances for audit events."""


def deployment_view(deployment) -> dict:
    return {"name": deployment.name, "tenant": deployment.tenant.slug if deployment.tenant_id else None,
            "model_version": str(deployment.model_version), "runtime_backend": deployment.runtime_backend,
            "min_replicas": deployment.min_replicas, "max_replicas": deployment.max_replicas,
            "warm_pool_size": deployment.warm_pool_size, "serving_replicas": deployment.serving_replicas,
            "tensor_parallel_size": deployment.tensor_parallel_size,
            "pipeline_parallel_size": deployment.pipeline_parallel_size, "gpu_type": deployment.gpu_type,
            "region": deployment.region, "status": deployment.status,
            "simulator_params": deployment.simulator_params,
            "fallback_model_name": deployment.fallback_model_name or None,
            "routing_policy": deployment.routing_policy}


def instance_view(instance) -> dict:
    return {"deployment": instance.deployment_id, "state": instance.state, "role": instance.role,
            "endpoint_url": instance.endpoint_url,
            "pid": (instance.runtime_handle or {}).get("pid"), "restart_count": instance.restart_count,
            "failure_reason": instance.failure_reason}
