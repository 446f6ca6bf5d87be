"""`kubernetes`: engines as pods in a namespace per tenant, through the official client (docs/kubernetes.md).

render.py builds the objects (pure), cluster.py applies and reads them, observe.py turns the pod
watch into instance states. Per instance: a Service that names it and a Pod — or a
LeaderWorkerSet when pipeline parallelism spans nodes; per tenant namespace: quota, limits and
network policies; per deployment: a PodDisruptionBudget. Readiness and deaths come from the watch
(`manage.py watch_engines`), not from the fleet's probes.
"""
from fleet.runtime.base import Launched, NoCapacity, RuntimeBackend
from fleet.runtime.kubernetes import names, render
from fleet.runtime.kubernetes.cluster import Cluster, ClusterUnavailable, QuotaExceeded
from fleet.runtime.kubernetes.options import KubernetesOptions
from fleet.runtime.kubernetes.targets import target_for

__all__ = ["KubernetesBackend"]


class KubernetesBackend(RuntimeBackend):
    name = "kubernetes"
    probed_by_fleet = False

    def __init__(self, **options):
        self.options = KubernetesOptions.parse(options)
        self._clusters: dict[str, Cluster] = {}

    @property
    def start_deadline_seconds(self) -> float:
        return float(self.options.startup_seconds + 120)  # the pod's own startup probe fails it first

    @property
    def cluster(self) -> Cluster:
        """The API client for this install (its field manager names the install)."""
        from fleet.install import install_id

        ours = install_id()
        if ours not in self._clusters:
            self._clusters[ours] = Cluster(self.options, field_manager=f"switchyard-{ours}")
        return self._clusters[ours]

    def observer(self, name: str):
        """The pod watch that moves this backend's instances on (`manage.py watch_engines` runs it)."""
        from fleet.runtime.kubernetes.observe import PodObserver

        return PodObserver(name, self)

    def spec_errors(self, deployment) -> dict[str, str]:
        errors = super().spec_errors(deployment)
        gpus = 0 if deployment.gpu_type.strip().lower() in render.CPU_GPU_TYPES else deployment.tensor_parallel_size
        if gpus > self.options.max_gpus_per_node:
            errors["tensor_parallel_size"] = (f"At most {self.options.max_gpus_per_node} GPUs per node: use pipeline "
                                              "parallelism to span nodes.")
        if deployment.pipeline_parallel_size > 1 and not self.options.multi_node:
            errors["pipeline_parallel_size"] = "This cluster runs no LeaderWorkerSet: multi-node engines are off."
        if not (self.options.weights_pvc or self.options.fetch_image):
            errors["runtime_backend"] = "This Kubernetes backend has no weights source (weights_pvc or fetch_image)."
        return errors

    def start(self, instance) -> Launched:
        target = target_for(instance, self.options)
        try:
            for obj in render.namespace_objects(target, self.options):
                self.cluster.apply(obj)
            self.cluster.apply(render.disruption_budget(target))
            for obj in render.instance_objects(target, self.options):
                self.cluster.apply(obj)
        except QuotaExceeded as exc:
            raise NoCapacity(f"waiting for room in namespace {target.namespace}: {exc}") from None
        except ClusterUnavailable as exc:
            raise NoCapacity(f"waiting for the Kubernetes API: {exc}") from None
        url = self.options.endpoint_template.format(service=target.object_name, namespace=target.namespace,
                                                    port=names.ENGINE_PORT)
        return Launched(endpoint_url=url, port=names.ENGINE_PORT, handle=self._handle(target))

    def _handle(self, target) -> dict:
        return {"namespace": target.namespace, "name": target.object_name,
                "kind": "LeaderWorkerSet" if target.multi_node else "Pod"}

    def stop(self, instance, grace: float) -> bool:
        return self._stop(instance.pk, instance.runtime_handle or {}, grace)

    def stop_orphan(self, instance_id: int, grace: float) -> bool:
        return self._stop(instance_id, self.running().get(instance_id, {}), grace)

    def _stop(self, instance_id: int, handle: dict, grace: float) -> bool:
        """Delete the workload and its Service; True once the workload is gone (deletion takes the grace)."""
        handle = handle or self.running().get(instance_id, {})
        if not handle.get("namespace"):
            return True  # nothing of ours runs for it
        kind, namespace, name = handle.get("kind", "Pod"), handle["namespace"], handle["name"]
        try:
            self.cluster.delete(kind, namespace, name, int(grace))
            self.cluster.delete("Service", namespace, name, 0)
            return self.cluster.read(kind, namespace, name) is None
        except ClusterUnavailable:
            return False  # asked again by the next drain step

    def is_alive(self, instance) -> bool:
        handle = instance.runtime_handle or {}
        if not handle.get("namespace"):
            return False
        try:
            found = self.cluster.read(handle.get("kind", "Pod"), handle["namespace"], handle["name"])
        except ClusterUnavailable:
            return True  # not knowing is not dead: the watch decides
        if found is None or found["metadata"].get("deletionTimestamp"):
            return False
        return found.get("status", {}).get("phase") not in ("Failed", "Succeeded")

    def log_tail(self, instance, lines: int = 40) -> str:
        handle = instance.runtime_handle or {}
        if not handle.get("namespace"):
            return ""
        pod = handle["name"] if handle.get("kind", "Pod") == "Pod" else f"{handle['name']}-0"  # LWS leader pod
        try:
            return self.cluster.pod_log(handle["namespace"], pod, lines)
        except ClusterUnavailable as exc:
            return f"(log unavailable: {exc})"

    def running(self) -> dict[int, dict]:
        """Instance id → handle of every engine workload of this install in the cluster."""
        from fleet.install import install_id

        selector = names.selector({names.INSTALL: install_id(), names.COMPONENT: names.ENGINE_COMPONENT})
        found: dict[int, dict] = {}
        for item in self.cluster.list_pods(selector).get("items", []):
            if item["metadata"].get("ownerReferences"):
                continue  # a LeaderWorkerSet's pod: its group is listed below
            found[_instance_of(item)] = {"namespace": item["metadata"]["namespace"], "name": item["metadata"]["name"],
                                         "kind": "Pod"}
        if self.options.multi_node:
            for item in self.cluster.list_worker_sets(selector).get("items", []):
                found[_instance_of(item)] = {"namespace": item["metadata"]["namespace"],
                                             "name": item["metadata"]["name"], "kind": "LeaderWorkerSet"}
        found.pop(0, None)
        return found


def _instance_of(item: dict) -> int:
    try:
        return int(item["metadata"]["labels"][names.INSTANCE])
    except (KeyError, ValueError):
        return 0
