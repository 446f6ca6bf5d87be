"""The kubernetes runtime backend against a stand-in API server (tests/fleet/kube_api.py): what it applies,
how it adopts, drains and sweeps, and how the pod watch moves instances on.

No Kubernetes cluster runs here: these tests check our calls and our reactions to real API object
shapes. Rendered objects are validated strictly against the official schemas (kubernetes-validate).
"""
import threading

import kubernetes_validate
import pytest
from django.db import connection

from fleet import reconcile, stopping
from fleet.models import Deployment, Instance
from fleet.runtime import get_backend
from fleet.runtime.kubernetes import names, render
from fleet.states import InstanceState
from tests.factories import make_tenant
from tests.fleet.conftest import make_version
from tests.fleet.kube_api import FakeKubernetes

S = InstanceState
KUBERNETES_VERSION = "1.33.0"
CRD_KINDS = {"LeaderWorkerSet"}  # not in the core schemas: checked by shape in test_pipeline_parallel_*


@pytest.fixture
def kube(settings):
    api = FakeKubernetes().start()
    settings.SWITCHYARD_RUNTIME_BACKENDS = {
        **{k: v for k, v in settings.SWITCHYARD_RUNTIME_BACKENDS.items() if k in ("local", "simulator")},
        "kubernetes": {"class": "fleet.runtime.kubernetes.KubernetesBackend", "label": "Kubernetes",
                       "options": {"host": api.url, "weights_pvc": "model-weights", "request_timeout_seconds": 5,
                                   "control_namespace": "switchyard",
                                   # Loopback, closed: a drain's probe of the engine must not resolve cluster names.
                                   "endpoint_template": "http://127.0.0.1:9/{namespace}/{service}"}}}
    yield api
    api.stop()


def validate(obj: dict) -> None:
    if obj["kind"] not in CRD_KINDS:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def k8s_deployment(tenant=None, **fields) -> Deployment:
    fields.setdefault("min_replicas", 0)
    fields.setdefault("max_replicas", 3)
    return Deployment.objects.create(tenant=tenant, name=f"k-{Deployment.objects.count()}",
                                     model_version=make_version(),
                                     runtime_backend="kubernetes", **fields)


def scale(deployment: Deployment, replicas: int) -> None:
    Deployment.objects.filter(pk=deployment.pk).update(min_replicas=replicas)
    reconcile.reconcile_deployment(deployment.pk)


@pytest.mark.django_db
def test_scaling_0_3_1_applies_exactly_the_expected_objects(kube, staff_client):
    make_tenant("acme")
    created = staff_client.post("/api/v1/deployments/", {
        "tenant": "acme", "name": "coder", "model_version": make_version().pk, "runtime_backend": "kubernetes",
        "min_replicas": 0, "max_replicas": 3, "gpu_type": "nvidia-l4", "region": "eu-west-1"}, format="json")
    assert created.status_code == 201, created.content
    deployment = Deployment.objects.get(name="coder")
    reconcile.reconcile_deployment(deployment.pk)
    assert kube.applied() == []

    assert staff_client.post(f"/api/v1/deployments/{deployment.pk}/scale/", {"min_replicas": 3},
                             format="json").status_code in (200, 202)
    reconcile.reconcile_deployment(deployment.pk)
    instances = list(Instance.objects.filter(deployment=deployment).order_by("pk"))
    assert [i.state for i in instances] == [S.STARTING] * 3
    namespace = instances[0].runtime_handle["namespace"]
    assert namespace == f"sy-{install()[:8]}-acme"
    pods = kube.of_kind("Pod")
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(names.instance_object(install(), i.pk)
                                                                  for i in instances)
    for pod in pods:
        assert pod["metadata"]["labels"][names.INSTALL] == install()
        assert pod["metadata"]["labels"][names.TENANT] == "acme"
        engine = pod["spec"]["containers"][0]
        assert engine["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "nvidia-l4"}
        assert engine["startupProbe"]["httpGet"]["path"] == "/health"
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["eu-west-1"]
    quota = kube.of_kind("ResourceQuota")[0]
    assert quota["metadata"]["namespace"] == namespace and quota["spec"]["hard"]["pods"] == "32"
    policies = {p["metadata"]["name"]: p for p in kube.of_kind("NetworkPolicy")}
    assert set(policies) == {"default-deny", "engines-from-switchyard", "engines-egress", "engine-groups"}
    assert {"Ingress", "Egress"} == set(policies["default-deny"]["spec"]["policyTypes"])
    assert len(kube.of_kind("Service")) == 3 and len(kube.of_kind("PodDisruptionBudget")) == 1
    for obj in [o for kind in ("Namespace", "ResourceQuota", "LimitRange", "NetworkPolicy", "PodDisruptionBudget",
                               "Service", "Pod") for o in kube.of_kind(kind)]:
        validate({k: v for k, v in obj.items() if k != "status"} | {"metadata": _spec_meta(obj)})
    assert all(c["content_type"] == "application/apply-patch+yaml" and
               c["query"]["fieldManager"] == [f"switchyard-{install()}"] for c in kube.applied())

    assert staff_client.post(f"/api/v1/deployments/{deployment.pk}/scale/", {"min_replicas": 1},
                             format="json").status_code in (200, 202)
    reconcile.reconcile_deployment(deployment.pk)
    draining = Instance.objects.filter(deployment=deployment, state=S.DRAINING)
    assert draining.count() == 2
    for instance in draining:
        assert stopping.drain_step(instance.pk) is True
    assert len(kube.of_kind("Pod")) == 1 and len(kube.of_kind("Service")) == 1
    assert Instance.objects.filter(deployment=deployment, state__in=(S.STARTING, S.READY)).count() == 1


def _spec_meta(obj: dict) -> dict:
    """metadata as we sent it (the stand-in adds server fields the schema allows but we never set)."""
    return {k: v for k, v in obj["metadata"].items() if k in ("name", "namespace", "labels")}


def install() -> str:
    from fleet.install import install_id

    return install_id()


@pytest.mark.django_db
def test_a_start_repeated_after_a_crash_adopts_what_is_there(kube):
    deployment = k8s_deployment(min_replicas=1)
    reconcile._plan(deployment.pk)
    instance = Instance.objects.select_related("deployment__model_version__model", "deployment__tenant").get(
        deployment=deployment)
    backend = get_backend("kubernetes")
    first, second = backend.start(instance), backend.start(instance)
    assert first == second and len(kube.of_kind("Pod")) == 1
    assert backend.running() == {instance.pk: {"namespace": first.handle["namespace"], "name": first.handle["name"],
                                               "kind": "Pod"}}


@pytest.mark.django_db
def test_a_full_namespace_quota_keeps_the_instance_pending_with_the_reason(kube):
    tenant = make_tenant("tight")
    from quotas.models import QuotaPolicy

    QuotaPolicy.objects.update_or_create(tenant=tenant, api_key=None, user=None, defaults={"max_instances": 1})
    deployment = k8s_deployment(tenant=tenant, min_replicas=1, max_replicas=1)
    reconcile.reconcile_deployment(deployment.pk)
    namespace = Instance.objects.get(deployment=deployment).runtime_handle["namespace"]
    # Someone else's pod already fills the namespace's quota of one.
    kube.objects[("Pod", namespace, "squatter")] = {"kind": "Pod", "metadata": {"name": "squatter",
                                                                                 "namespace": namespace, "labels": {}}}
    Instance.objects.filter(deployment=deployment).delete()
    reconcile.reconcile_deployment(deployment.pk)
    instance = Instance.objects.get(deployment=deployment)
    assert instance.state == S.PENDING and "exceeded quota" in instance.pending_reason


@pytest.mark.django_db
def test_transient_api_errors_are_retried_and_a_persistent_one_keeps_the_instance_pending(kube):
    deployment = k8s_deployment(min_replicas=1)
    kube.fail_next("PATCH", r"/pods/", 429, retry_after="0")
    kube.fail_next("PATCH", r"/pods/", 500)
    reconcile.reconcile_deployment(deployment.pk)
    assert Instance.objects.get(deployment=deployment).state == S.STARTING

    other = k8s_deployment(min_replicas=1)
    kube.fail_next("PATCH", r"/services/", 503, times=3)
    reconcile.reconcile_deployment(other.pk)
    instance = Instance.objects.get(deployment=other)
    assert instance.state == S.PENDING and "waiting for the Kubernetes API" in instance.pending_reason
    reconcile.reconcile_deployment(other.pk)  # the API is back
    assert Instance.objects.get(deployment=other).state == S.STARTING


@pytest.mark.django_db
def test_a_conflict_is_not_retried_blindly_and_fails_the_start_with_the_servers_reason(kube):
    deployment = k8s_deployment(min_replicas=1)
    kube.fail_next("PATCH", r"/pods/", 409)
    reconcile.reconcile_deployment(deployment.pk)
    instance = Instance.objects.get(deployment=deployment)
    assert instance.state == S.FAILED and "start failed" in instance.failure_reason


@pytest.mark.django_db
def test_orphans_are_stopped_and_a_second_installs_objects_are_never_touched(kube):
    deployment = k8s_deployment(min_replicas=1)
    reconcile.reconcile_deployment(deployment.pk)
    ours = Instance.objects.get(deployment=deployment)
    theirs = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "sy-00000000-i1", "namespace": "sy-00000000-shared",
        "labels": {**names.engine_labels("0" * 16, None, 1, 1)}}}
    kube.objects[("Pod", "sy-00000000-shared", "sy-00000000-i1")] = theirs
    Instance.objects.filter(pk=ours.pk).update(state=S.STOPPED)  # its row says stopped: the pod is an orphan
    assert reconcile.sweep_orphans() == [ours.pk]
    assert [p["metadata"]["name"] for p in kube.of_kind("Pod")] == ["sy-00000000-i1"]
    assert not any(call["path"].startswith("/api/v1/namespaces/sy-00000000") for call in kube.calls
                   if call["method"] in ("PATCH", "DELETE"))


@pytest.mark.django_db
def test_a_failed_instance_keeps_its_pods_log_tail(kube):
    deployment = k8s_deployment(min_replicas=1)
    reconcile.reconcile_deployment(deployment.pk)
    instance = Instance.objects.get(deployment=deployment)
    kube.log_lines[instance.runtime_handle["name"]] = "loading weights\nCUDA out of memory"
    assert get_backend("kubernetes").log_tail(instance, 1) == "CUDA out of memory"


def test_tensor_parallel_two_requests_two_gpus_and_passes_the_flag():
    target = _target(tensor_parallel_size=2, gpu_type="a100")
    pod = render.pod(target, _options())
    engine = pod["spec"]["containers"][0]
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert engine["command"][engine["command"].index("--tensor-parallel-size") + 1] == "2"
    validate(pod)


def test_pipeline_parallel_across_nodes_is_a_leader_worker_set_with_vllms_commands():
    target = _target(tensor_parallel_size=8, pipeline_parallel_size=2, gpu_type="h100")
    workload = render.instance_objects(target, _options())[1]
    assert workload["kind"] == "LeaderWorkerSet" and workload["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    group = workload["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2
    leader = group["leaderTemplate"]["spec"]["containers"][0]["command"][-1]
    worker = group["workerTemplate"]["spec"]["containers"][0]["command"][-1]
    assert "multi-node-serving.sh leader --ray_cluster_size=$(LWS_GROUP_SIZE)" in leader
    assert "--tensor-parallel-size 8" in leader and "--pipeline-parallel-size 2" in leader
    assert "multi-node-serving.sh worker --ray_address=$(LWS_LEADER_ADDRESS)" in worker
    for template in ("leaderTemplate", "workerTemplate"):  # each template is a valid pod
        validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", **group[template]["metadata"]},
                  "spec": group[template]["spec"]})
    assert render.service(target)["spec"]["selector"][render.ROLE] == "leader"


def _options(**overrides):
    from fleet.runtime.kubernetes.options import KubernetesOptions

    return KubernetesOptions.parse({"host": "http://127.0.0.1:9", "weights_pvc": "w", **overrides})


def _target(**fields):
    base = dict(install_id="ab" * 8, namespace="sy-abababab-acme", tenant_slug="acme", deployment_id=1, instance_id=7,
                engine_argv=("--model", "/models/x", "--port", "8000"), artifact_uri="x", checksum="",
                tensor_parallel_size=1, pipeline_parallel_size=1, gpu_type="", region="local", replicas=2,
                max_instances=4, max_gpus=8)
    base.update(fields)
    if base["tensor_parallel_size"] > 1 or base["pipeline_parallel_size"] > 1:
        argv = list(base["engine_argv"])
        argv += ["--tensor-parallel-size", str(base["tensor_parallel_size"])] * (base["tensor_parallel_size"] > 1)
        argv += ["--pipeline-parallel-size", str(base["pipeline_parallel_size"])] * (base["pipeline_parallel_size"] > 1)
        base["engine_argv"] = tuple(argv)
    return render.EngineTarget(**base)


# --- the pod watch ---------------------------------------------------------------------------------------

@pytest.fixture
def watching(kube):
    """`manage.py watch_engines`' observer, running in a thread for the test."""
    from fleet.runtime.kubernetes import observe

    stop = threading.Event()
    observer = get_backend("kubernetes").observer("kubernetes")

    def run():
        try:
            observer.run(stop)
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    observe.ERROR_PAUSE_SECONDS = 0.1
    yield observer, thread
    stop.set()
    kube.drop_watches()
    thread.join(timeout=10)


def wait_for(predicate, seconds: float = 10.0) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


server_database = pytest.mark.skipif(connection.vendor != "postgresql",
                                     reason="the watch thread and the test share rows: needs PostgreSQL")


@server_database
@pytest.mark.django_db(transaction=True)
def test_the_watch_makes_ready_pods_ready_and_replaces_failed_evicted_and_deleted_ones(kube, watching):
    observer, thread = watching
    deployment = k8s_deployment(min_replicas=4, max_replicas=4)
    reconcile.reconcile_deployment(deployment.pk)
    thread.start()
    ready, evicted, crashed, deleted = Instance.objects.filter(deployment=deployment).order_by("pk")
    ns = ready.runtime_handle["namespace"]
    kube.set_pod_status(ns, ready.runtime_handle["name"], ready=True)
    assert wait_for(lambda: Instance.objects.get(pk=ready.pk).state == S.READY)
    kube.set_pod_status(ns, evicted.runtime_handle["name"], phase="Failed", reason="Evicted",
                        message="The node was low on resource: memory.")
    kube.set_pod_status(ns, crashed.runtime_handle["name"], phase="Failed",
                        terminated={"reason": "OOMKilled", "exitCode": 137})
    kube.delete_behind_our_back(ns, deleted.runtime_handle["name"])
    assert wait_for(lambda: Instance.objects.filter(pk__in=[evicted.pk, crashed.pk, deleted.pk],
                                                    state=S.FAILED).count() == 3)
    reasons = {i.pk: i.failure_reason for i in Instance.objects.filter(state=S.FAILED)}
    assert "pod evicted: The node was low on resource: memory." in reasons[evicted.pk]
    assert "OOMKilled (exit code 137)" in reasons[crashed.pk]
    assert "its pod was deleted" in reasons[deleted.pk]
    for instance_id in reasons:  # what replace_failed does: clean up, then reconcile starts replacements
        stopping.clean_up_failed(instance_id)
    Deployment.objects.filter(pk=deployment.pk).update(min_replicas=4)
    reconcile.reconcile_deployment(deployment.pk)
    live = Instance.objects.filter(deployment=deployment, state__in=(S.PENDING, S.STARTING, S.READY))
    assert live.count() == 4


@server_database
@pytest.mark.django_db(transaction=True)
def test_the_watch_survives_a_dropped_stream_an_expired_version_and_api_errors(kube, watching):
    observer, thread = watching
    deployment = k8s_deployment(min_replicas=2, max_replicas=2)
    reconcile.reconcile_deployment(deployment.pk)
    first, second = Instance.objects.filter(deployment=deployment).order_by("pk")
    thread.start()
    assert wait_for(lambda: observer.resource_version != "")
    kube.drop_watches()
    kube.compact()  # the resumed watch gets 410 Gone and must relist
    kube.fail_next("GET", r"^/api/v1/pods$", 500, times=3)  # and the relist fails once (after retries)
    ns = first.runtime_handle["namespace"]
    kube.set_pod_status(ns, first.runtime_handle["name"], ready=True)
    assert wait_for(lambda: Instance.objects.get(pk=first.pk).state == S.READY, 15)
    kube.set_pod_status(ns, second.runtime_handle["name"], ready=True)
    assert wait_for(lambda: Instance.objects.get(pk=second.pk).state == S.READY, 15)


@pytest.mark.django_db
def test_a_relist_fails_instances_whose_pod_is_gone_and_those_never_ready(kube, settings):
    from datetime import timedelta

    from django.utils import timezone

    deployment = k8s_deployment(min_replicas=2, max_replicas=2)
    reconcile.reconcile_deployment(deployment.pk)
    gone, slow = Instance.objects.filter(deployment=deployment).order_by("pk")
    kube.objects.pop(("Pod", gone.runtime_handle["namespace"], gone.runtime_handle["name"]))
    long_ago = timezone.now() - timedelta(hours=2)
    Instance.objects.filter(pk__in=[gone.pk, slow.pk]).update(starting_at=long_ago)
    kube.set_pod_status(slow.runtime_handle["namespace"], slow.runtime_handle["name"], ready=False)
    get_backend("kubernetes").observer("kubernetes").relist()
    assert "its Pod is gone from the cluster" in Instance.objects.get(pk=gone.pk).failure_reason
    assert "not ready within" in Instance.objects.get(pk=slow.pk).failure_reason


@pytest.mark.django_db
def test_the_kubernetes_backend_refuses_what_it_cannot_run(kube, staff_client):
    version = make_version()
    body = {"name": "big", "model_version": version.pk, "runtime_backend": "kubernetes", "min_replicas": 0,
            "gpu_type": "h100", "tensor_parallel_size": 16}
    answer = staff_client.post("/api/v1/deployments/", body, format="json")
    assert answer.status_code == 400 and "At most 8 GPUs per node" in str(answer.json()["tensor_parallel_size"])


def test_watch_engines_refuses_to_run_without_a_backend_that_watches(settings):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="no configured runtime backend watches its own engines"):
        call_command("watch_engines")
