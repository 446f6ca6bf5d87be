"""The Kubernetes backend's options (SWITCHYARD_RUNTIME_BACKENDS → "options"), checked when it is built."""
from dataclasses import dataclass, field, fields

DEFAULT_ENGINE_IMAGE = "vllm/vllm-openai:v0.32.0"
# HTTPS anywhere but private and link-local ranges: a hub or object store, never cluster-internal services.
PUBLIC_INTERNET = {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16",
                                                     "100.64.0.0/10"], "ports": [443]}


class BadOptions(ValueError):
    """An option the backend cannot use; the message names it."""


@dataclass(frozen=True)
class KubernetesOptions:
    # Where the API server is: in-cluster config, a kubeconfig (and context), or an explicit URL.
    in_cluster: bool = False
    kubeconfig: str = ""
    context: str = ""
    host: str = ""
    request_timeout_seconds: float = 10.0
    # Engine namespaces are "<namespace_prefix>-<tenant slug>"; empty derives "sy-<install id>".
    namespace_prefix: str = ""
    engine_image: str = DEFAULT_ENGINE_IMAGE
    image_pull_policy: str = "IfNotPresent"
    engine_cpu: str = "4"
    engine_memory: str = "32Gi"
    shm_size: str = "8Gi"
    startup_seconds: int = 1800  # weights of a large model take a while to load
    max_gpus_per_node: int = 8
    # gpu_type → node labels; a type not listed selects nodes by nvidia.com/gpu.product = the type.
    gpu_node_labels: dict = field(default_factory=dict)
    # Weights: a read-only PVC holding model directories (paths as under SWITCHYARD_MODEL_ROOT), or
    # fetched by an init container (the Switchyard image) that checks the artifact's checksum.
    weights_pvc: str = ""
    fetch_image: str = ""
    weights_size: str = "200Gi"
    # Who may reach engine ports: pods with these labels in this namespace (the Helm release's).
    control_namespace: str = "switchyard"
    client_labels: list = field(default_factory=lambda: [{"app.kubernetes.io/component": "gateway"},
                                                         {"app.kubernetes.io/component": "worker"}])
    # Egress of engine pods besides DNS: where artifacts are fetched from ([] with a PVC).
    artifact_egress: list = field(default_factory=lambda: [PUBLIC_INTERNET])
    # How the gateway and workers reach an instance's Service (the cluster's DNS domain may differ).
    endpoint_template: str = "http://{service}.{namespace}.svc:{port}"
    multi_node: bool = True  # pipeline parallel across nodes as a LeaderWorkerSet (the LWS CRD installed)
    drain_grace_seconds: int = 30

    @classmethod
    def parse(cls, raw: dict) -> "KubernetesOptions":
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise BadOptions(f"unknown kubernetes backend option(s): {', '.join(unknown)}")
        options = cls(**raw)
        options.check()
        return options

    def check(self) -> None:
        if sum(bool(x) for x in (self.in_cluster, self.kubeconfig, self.host)) > 1:
            raise BadOptions("give at most one of in_cluster, kubeconfig and host")
        if self.weights_pvc and self.fetch_image:
            raise BadOptions("give weights_pvc or fetch_image, not both")
        if self.max_gpus_per_node < 1 or self.startup_seconds < 10:
            raise BadOptions("max_gpus_per_node must be ≥ 1 and startup_seconds ≥ 10")
        try:
            self.endpoint_template.format(service="s", namespace="n", port=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise BadOptions(f"endpoint_template may use {{service}}, {{namespace}} and {{port}} only "
                             f"({exc})") from None
        if not all(isinstance(labels, dict) and labels for labels in self.client_labels):
            raise BadOptions("client_labels must be a list of non-empty label objects")

    @property
    def weights_mount(self) -> str:
        return "/models"
