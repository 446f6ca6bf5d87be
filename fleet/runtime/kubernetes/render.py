"""Kubernetes objects for a tenant's namespace and for one engine instance: pure functions of their inputs.

Nothing here talks to a cluster; `apply.py` sends what these return. Every object carries this
install's labels. The engine's flags come from the same renderer as the local backend's
(`models_registry.engine_args.render_vllm_argv`).
"""
import math
import shlex
from dataclasses import dataclass
from typing import Any

from fleet.runtime.kubernetes import names
from fleet.runtime.kubernetes.options import KubernetesOptions

CPU_GPU_TYPES = frozenset({"", "cpu"})
NO_REGION = frozenset({"", "local"})
LWS_GROUP = "leaderworkerset.x-k8s.io"
RAY_SCRIPT = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"  # in vLLM's image (its LWS docs)
ROLE = f"{names.LABEL_PREFIX}/role"


@dataclass(frozen=True)
class EngineTarget:
    """What the renderer needs to know about one instance, read from the database beforehand."""

    install_id: str
    namespace: str
    tenant_slug: str | None
    deployment_id: int
    instance_id: int
    engine_argv: tuple[str, ...]  # the vLLM flags (after the module name)
    artifact_uri: str
    checksum: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpu_type: str
    region: str
    replicas: int
    max_instances: int | None  # the tenant's quota (None: a shared pool's namespace)
    max_gpus: int | None

    @property
    def gpus(self) -> int:
        return 0 if self.gpu_type.strip().lower() in CPU_GPU_TYPES else self.tensor_parallel_size

    @property
    def multi_node(self) -> bool:
        return self.pipeline_parallel_size > 1

    @property
    def labels(self) -> dict[str, str]:
        return names.engine_labels(self.install_id, self.tenant_slug, self.deployment_id, self.instance_id)

    @property
    def object_name(self) -> str:
        return names.instance_object(self.install_id, self.instance_id)


def _meta(name: str, namespace: str | None, labels: dict) -> dict:
    meta = {"name": name, "labels": dict(labels)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


# --- the tenant's namespace -------------------------------------------------------------------------

def namespace_objects(target: EngineTarget, options: KubernetesOptions) -> list[dict]:
    """Namespace, ResourceQuota, LimitRange and NetworkPolicies of the target's tenant (or shared pools)."""
    ns, labels = target.namespace, {**names.install_labels(target.install_id), names.TENANT: target.tenant_slug
                                    or names.SHARED}
    objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(ns, None, {
        **labels, "pod-security.kubernetes.io/enforce": "restricted"})}]
    if target.max_instances is not None:
        objects.append(resource_quota(target, options))
    objects.append(limit_range(target, options))
    objects += network_policies(target, options)
    return objects


def resource_quota(target: EngineTarget, options: KubernetesOptions) -> dict:
    """The tenant's quota as the cluster enforces it: pods, GPUs, CPU and memory of its instances."""
    labels = names.install_labels(target.install_id)
    pods = (target.max_instances or 0) * max(1, target.pipeline_parallel_size)  # called only with a quota
    hard = {"pods": str(pods), "requests.nvidia.com/gpu": str(target.max_gpus or 0),
            "requests.cpu": _times(options.engine_cpu, pods), "requests.memory": _times(options.engine_memory, pods),
            "limits.memory": _times(options.engine_memory, pods)}
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": _meta("switchyard-quota", target.namespace, labels),
            "spec": {"hard": hard}}


def limit_range(target: EngineTarget, options: KubernetesOptions) -> dict:
    """Defaults for any container without requests (an init container), and a ceiling of one engine."""
    labels = names.install_labels(target.install_id)
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": _meta("switchyard-limits", target.namespace, labels),
            "spec": {"limits": [{"type": "Container",
                                 "defaultRequest": {"cpu": "100m", "memory": "256Mi"},
                                 "default": {"cpu": "1", "memory": "1Gi"},
                                 "max": {"memory": options.engine_memory}}]}}


def network_policies(target: EngineTarget, options: KubernetesOptions) -> list[dict]:
    """Default deny; engine ports open only to the control namespace's gateway/worker pods; egress DNS + artifacts."""
    ns, labels = target.namespace, names.install_labels(target.install_id)
    engines = {"matchLabels": {names.COMPONENT: names.ENGINE_COMPONENT}}
    deny = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _meta("default-deny", ns, labels),
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}
    clients = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": options.control_namespace}},
                "podSelector": {"matchLabels": dict(selected)}} for selected in options.client_labels]
    ingress = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": _meta("engines-from-switchyard", ns, labels),
               "spec": {"podSelector": engines, "policyTypes": ["Ingress"],
                        "ingress": [{"from": clients, "ports": [{"protocol": "TCP", "port": names.ENGINE_PORT}]}]}}
    egress_rules = [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                             "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                     "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}]
    for rule in options.artifact_egress:
        block = {"cidr": rule["cidr"], **({"except": list(rule["except"])} if rule.get("except") else {})}
        egress_rules.append({"to": [{"ipBlock": block}],
                             "ports": [{"protocol": "TCP", "port": int(port)} for port in rule.get("ports", [443])]})
    egress = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": _meta("engines-egress", ns, labels),
              "spec": {"podSelector": engines, "policyTypes": ["Egress"], "egress": egress_rules}}
    # The pods of one multi-node engine talk to each other (Ray, NCCL), and to nothing of another engine.
    group = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
             "metadata": _meta("engine-groups", ns, labels),
             "spec": {"podSelector": {"matchExpressions": [{"key": LWS_GROUP_LABEL, "operator": "Exists"}]},
                      "policyTypes": ["Ingress", "Egress"],
                      "ingress": [{"from": [{"podSelector": {"matchExpressions": [
                          {"key": LWS_GROUP_LABEL, "operator": "Exists"}]}}]}],
                      "egress": [{"to": [{"podSelector": {"matchExpressions": [
                          {"key": LWS_GROUP_LABEL, "operator": "Exists"}]}}]}]}}
    return [deny, ingress, egress, group]


LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/name"


def disruption_budget(target: EngineTarget) -> dict:
    """Voluntary evictions (node drains) keep all but one of the deployment's engines serving."""
    labels = names.install_labels(target.install_id)
    selector = {names.INSTALL: target.install_id, names.DEPLOYMENT: str(target.deployment_id),
                names.COMPONENT: names.ENGINE_COMPONENT}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": _meta(names.deployment_object(target.install_id, target.deployment_id), target.namespace,
                              {**labels, names.DEPLOYMENT: str(target.deployment_id)}),
            "spec": {"minAvailable": max(target.replicas - 1, 0), "selector": {"matchLabels": selector}}}


# --- one instance -------------------------------------------------------------------------------------

def instance_objects(target: EngineTarget, options: KubernetesOptions) -> list[dict]:
    """The Service that names the engine, then its Pod — or its LeaderWorkerSet when it spans nodes."""
    workload = leader_worker_set(target, options) if target.multi_node else pod(target, options)
    return [service(target), workload]


def service(target: EngineTarget) -> dict:
    selector = {names.INSTALL: target.install_id, names.INSTANCE: str(target.instance_id)}
    if target.multi_node:
        selector[ROLE] = "leader"
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _meta(target.object_name, target.namespace, target.labels),
            "spec": {"type": "ClusterIP", "selector": selector,
                     "ports": [{"name": "http", "protocol": "TCP", "port": names.ENGINE_PORT,
                                "targetPort": names.ENGINE_PORT}]}}


def pod(target: EngineTarget, options: KubernetesOptions) -> dict:
    container = engine_container(target, options, _serve_command(target))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _meta(target.object_name, target.namespace, target.labels),
            "spec": pod_spec(target, options, container)}


def leader_worker_set(target: EngineTarget, options: KubernetesOptions) -> dict:
    """vLLM's documented multi-node launch: a Ray head with the API server on the leader, Ray workers beside it."""
    leader_command = (f"bash {RAY_SCRIPT} leader --ray_cluster_size=$(LWS_GROUP_SIZE); "
                      + shlex.join(_serve_command(target)))
    worker_command = f"bash {RAY_SCRIPT} worker --ray_address=$(LWS_LEADER_ADDRESS)"
    leader = engine_container(target, options, ["sh", "-c", leader_command])
    worker = engine_container(target, options, ["sh", "-c", worker_command], probes=False)
    return {"apiVersion": f"{LWS_GROUP}/v1", "kind": "LeaderWorkerSet",
            "metadata": _meta(target.object_name, target.namespace, target.labels),
            "spec": {"replicas": 1, "leaderWorkerTemplate": {
                "size": target.pipeline_parallel_size, "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": {"labels": {**target.labels, ROLE: "leader"}},
                                   "spec": pod_spec(target, options, leader, restart="Always")},
                "workerTemplate": {"metadata": {"labels": {**target.labels, ROLE: "worker"}},
                                   "spec": pod_spec(target, options, worker, restart="Always")}}}}


def _serve_command(target: EngineTarget) -> list[str]:
    return ["python3", "-m", "vllm.entrypoints.openai.api_server", *target.engine_argv]


def pod_spec(target: EngineTarget, options: KubernetesOptions, container: dict, *, restart: str = "Never") -> dict:
    """Never restarted in place: an engine that dies fails its instance, which is replaced with back-off."""
    spec = {"restartPolicy": restart, "automountServiceAccountToken": False, "enableServiceLinks": False,
            "terminationGracePeriodSeconds": options.drain_grace_seconds,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container], "volumes": _volumes(options)}
    if options.fetch_image:
        spec["initContainers"] = [_fetch_container(target, options)]
    if target.gpus:
        spec["nodeSelector"] = dict(options.gpu_node_labels.get(target.gpu_type)
                                    or {"nvidia.com/gpu.product": target.gpu_type})
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    if target.region.strip().lower() not in NO_REGION:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.kubernetes.io/region", "operator": "In",
                                   "values": [target.region]}]}]}}}
    return spec


def engine_container(target: EngineTarget, options: KubernetesOptions, command: list[str], *,
                     probes: bool = True) -> dict:
    resources = {"requests": {"cpu": options.engine_cpu, "memory": options.engine_memory},
                 "limits": {"memory": options.engine_memory}}
    if target.gpus:
        resources["requests"]["nvidia.com/gpu"] = resources["limits"]["nvidia.com/gpu"] = str(target.gpus)
    container: dict[str, Any] = {
        "name": "engine", "image": options.engine_image, "imagePullPolicy": options.image_pull_policy,
        "command": list(command), "ports": [{"name": "http", "containerPort": names.ENGINE_PORT, "protocol": "TCP"}],
        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}, {"name": "HOME", "value": "/tmp"},
                {"name": "HF_HOME", "value": "/tmp/hf"}, {"name": "VLLM_CACHE_ROOT", "value": "/tmp/vllm"}],
        "resources": resources,
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"},
                         {"name": "weights", "mountPath": options.weights_mount, "readOnly": True}]}
    if probes:
        health: dict[str, Any] = {"httpGet": {"path": "/health", "port": names.ENGINE_PORT}}
        container["startupProbe"] = {**health, "periodSeconds": 10, "timeoutSeconds": 5,
                                     "failureThreshold": math.ceil(options.startup_seconds / 10)}
        container["readinessProbe"] = {**health, "periodSeconds": 5, "timeoutSeconds": 3, "failureThreshold": 2}
        container["livenessProbe"] = {**health, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3}
    return container


def _volumes(options: KubernetesOptions) -> list[dict]:
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": options.shm_size}},
               {"name": "tmp", "emptyDir": {"sizeLimit": "20Gi"}}]
    if options.weights_pvc:
        volumes.append({"name": "weights", "persistentVolumeClaim": {"claimName": options.weights_pvc,
                                                                     "readOnly": True}})
    else:
        volumes.append({"name": "weights", "emptyDir": {"sizeLimit": options.weights_size}})
    return volumes


def _fetch_container(target: EngineTarget, options: KubernetesOptions) -> dict:
    """Fetches the artifact into the weights volume and refuses weights whose checksum differs."""
    return {"name": "fetch-weights", "image": options.fetch_image, "imagePullPolicy": options.image_pull_policy,
            "command": ["python", "-m", "fleet.runtime.kubernetes.fetch", "--uri", target.artifact_uri,
                        "--checksum", target.checksum, "--dest", f"{options.weights_mount}/model"],
            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "weights", "mountPath": options.weights_mount},
                             {"name": "tmp", "mountPath": "/tmp"}]}


def _times(quantity: str, count: int) -> str:
    """A Kubernetes quantity times `count` ("4" × 3 = "12", "32Gi" × 3 = "96Gi", "500m" × 3 = "1500m")."""
    number = quantity.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = quantity[len(number):]
    value = float(number) * count
    return f"{int(value) if value.is_integer() else value}{unit}"
