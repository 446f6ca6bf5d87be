"""Reading what the renderer needs about an instance out of the database (render.py stays pure)."""
from pathlib import PurePosixPath

from fleet.runtime.kubernetes import names
from fleet.runtime.kubernetes.options import KubernetesOptions
from fleet.runtime.kubernetes.render import EngineTarget


def namespace_prefix(options: KubernetesOptions, install_id: str) -> str:
    """The option, or one derived from the install id (two installs on a cluster never share a namespace)."""
    return options.namespace_prefix or f"sy-{install_id[:8]}"


def target_for(instance, options: KubernetesOptions) -> EngineTarget:
    from fleet.install import install_id
    from models_registry.engine_args import render_vllm_argv

    ours = install_id()
    deployment = instance.deployment
    version, tenant = instance.version, deployment.tenant
    argv = render_vllm_argv(version, model_path=model_path_in_pod(version, options),
                            served_model_name=version.model.name, port=names.ENGINE_PORT, host="0.0.0.0",
                            cpu=deployment.gpu_type.strip().lower() in ("", "cpu"),
                            tensor_parallel_size=deployment.tensor_parallel_size,
                            pipeline_parallel_size=deployment.pipeline_parallel_size)
    quota = _quota(tenant)
    return EngineTarget(
        install_id=ours, namespace=names.namespace(namespace_prefix(options, ours), tenant.slug if tenant else None),
        tenant_slug=tenant.slug if tenant else None, deployment_id=deployment.pk, instance_id=instance.pk,
        engine_argv=tuple(argv), artifact_uri=version.artifact_uri, checksum=version.checksum,
        tensor_parallel_size=deployment.tensor_parallel_size, pipeline_parallel_size=deployment.pipeline_parallel_size,
        gpu_type=deployment.gpu_type, region=deployment.region, replicas=deployment.target_replicas,
        max_instances=quota[0], max_gpus=quota[1])


def _quota(tenant) -> tuple[int | None, int | None]:
    if tenant is None:
        return None, None
    from quotas.selectors import capacity_quota

    quota = capacity_quota(tenant)
    return quota.max_instances, quota.max_gpus


def model_path_in_pod(version, options: KubernetesOptions) -> str:
    """Where the weights are inside the engine's pod: fetched to <mount>/model, or at their place on the volume.

    On a weights volume, a local artifact keeps its path under SWITCHYARD_MODEL_ROOT, and the others
    sit at hf/<org>/<repo>/<revision>, s3/<bucket>/<key> or https/<host>/<path>.
    """
    from models_registry.artifacts import ArtifactScheme, artifact_scheme, local_relative_path

    mount = PurePosixPath(options.weights_mount)
    if options.fetch_image:
        return str(mount / "model")
    uri = version.artifact_uri
    scheme = artifact_scheme(uri)
    if scheme == ArtifactScheme.LOCAL:
        return str(mount / local_relative_path(uri))
    if scheme == ArtifactScheme.HUGGINGFACE:
        repo, _, revision = uri[len("hf://"):].partition("@")
        return str(mount / "hf" / repo / revision)
    return str(mount / scheme / uri.split("://", 1)[1].split("?")[0])
