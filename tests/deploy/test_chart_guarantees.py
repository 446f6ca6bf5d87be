"""What the chart promises an operator, checked on the rendered objects (default, production, trial)."""
import base64
import json

import pytest
import yaml

from tests.deploy.conftest import CHART, NAMESPACE, VALUES, all_containers, named, objects, pod_spec

SECRET_SETTINGS = {"SECRET_KEY", "SWITCHYARD_KEY_PEPPER", "SWITCHYARD_AUDIT_SIGNING_KEY", "DATABASE_URL",
                   "REDIS_URL", "SWITCHYARD_GATEWAY_REDIS_URL", "SWITCHYARD_AUDIT_WITNESS_URL",
                   "SWITCHYARD_METRICS_TOKEN"}
COMPONENTS = ("console", "gateway", "worker", "beat")
GATEWAY_LABELS = {"app.kubernetes.io/name": "switchyard", "app.kubernetes.io/instance": "switchyard",
                  "app.kubernetes.io/component": "gateway"}
# The worker's whole power over the cluster: (API group, resource) → verbs. Nothing else, no wildcard.
WORKER_RULES = {
    ("", "namespaces"): {"get", "list", "create", "patch"},
    ("", "resourcequotas"): {"get", "list", "create", "patch"},
    ("", "limitranges"): {"get", "list", "create", "patch"},
    ("networking.k8s.io", "networkpolicies"): {"get", "list", "create", "patch"},
    ("", "services"): {"get", "list", "create", "patch", "delete"},
    ("", "pods"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "pods/log"): {"get"},
    ("policy", "poddisruptionbudgets"): {"get", "list", "create", "patch", "delete"},
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): {"get", "list", "create", "patch", "delete"},
}


@pytest.fixture(params=list(VALUES))
def docs(request, rendered) -> list[dict]:
    return rendered[request.param]


def deployment(docs, component: str) -> dict:
    return named(docs, "Deployment", f"switchyard-{component}")


def test_exactly_one_beat_replaced_not_rolled(docs):
    beat = deployment(docs, "beat")
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"] == {"type": "Recreate"}
    worker_args = pod_spec(deployment(docs, "worker"))["containers"][0]["args"]
    assert "-B" not in worker_args and "--beat" not in worker_args


def test_the_beat_replica_count_is_not_a_value(render):
    docs = render("--set", "beat.replicas=3")
    assert named(docs, "Deployment", "switchyard-beat")["spec"]["replicas"] == 1


def test_no_pod_disruption_budget_ever_selects_the_beat(rendered):
    pdbs = objects(rendered["production"], "PodDisruptionBudget")
    assert sorted(p["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] for p in pdbs) == [
        "console", "gateway", "worker"]


def test_migrations_run_as_a_hook_job_before_pods_on_upgrade(docs):
    job = named(docs, "Job", "switchyard-migrate")
    hooks = set(job["metadata"]["annotations"]["helm.sh/hook"].split(","))
    assert "pre-upgrade" in hooks and hooks & {"pre-install", "post-install"}
    assert pod_spec(job)["containers"][0]["args"] == ["migrate"]
    for component in COMPONENTS:  # and no process starts against an older schema
        assert pod_spec(deployment(docs, component))["initContainers"][0]["args"] == ["wait-for-migrations"]


def test_with_an_existing_secret_migrations_run_before_install(rendered):
    job = named(rendered["production"], "Job", "switchyard-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    account = named(rendered["production"], "ServiceAccount", "switchyard-migrate")
    weight = "helm.sh/hook-weight"
    assert account["metadata"]["annotations"][weight] < job["metadata"]["annotations"][weight]


def test_only_the_worker_gets_a_service_account_token(docs):
    for component in ("console", "gateway", "beat"):
        assert pod_spec(deployment(docs, component))["automountServiceAccountToken"] is False
        assert named(docs, "ServiceAccount", f"switchyard-{component}")["automountServiceAccountToken"] is False
    assert pod_spec(named(docs, "Job", "switchyard-migrate"))["automountServiceAccountToken"] is False
    assert pod_spec(deployment(docs, "worker"))["serviceAccountName"] == "switchyard-worker"
    bindings = objects(docs, "ClusterRoleBinding") + objects(docs, "RoleBinding")
    subjects = [subject for binding in bindings for subject in binding["subjects"]]
    assert subjects == [{"kind": "ServiceAccount", "name": "switchyard-worker", "namespace": NAMESPACE}]


def test_the_worker_rbac_is_exactly_what_the_kubernetes_backend_needs(docs):
    (role,) = objects(docs, "ClusterRole")
    assert not objects(docs, "Role")
    granted = {}
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}  # no resourceNames/nonResourceURLs tricks
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == WORKER_RULES


def test_worker_writes_are_kept_to_its_engine_namespaces(docs):
    policy = named(docs, "ValidatingAdmissionPolicy", "switchyard-engine-namespaces")
    (condition,) = policy["spec"]["matchConditions"]
    assert f"system:serviceaccount:{NAMESPACE}:switchyard-worker" in condition["expression"]
    # The release name is the default prefix; values-production.yaml names the same one.
    assert all('startsWith("switchyard-")' in v["expression"] for v in policy["spec"]["validations"])
    binding = named(docs, "ValidatingAdmissionPolicyBinding", "switchyard-engine-namespaces")
    assert binding["spec"] == {"policyName": "switchyard-engine-namespaces", "validationActions": ["Deny"]}


def test_secrets_never_reach_the_config_map_or_the_environment(docs):
    config = named(docs, "ConfigMap", "switchyard")["data"]
    assert not SECRET_SETTINGS & set(config)
    secret_values = {base64.b64decode(v).decode() for s in objects(docs, "Secret") for v in s["data"].values()}
    assert not {v for v in secret_values if v} & set(config.values())
    for workload in objects(docs, "Deployment") + objects(docs, "Job"):
        for container in all_containers(workload):
            env = {item["name"]: item for item in container.get("env", [])}
            assert not SECRET_SETTINGS & set(env), workload["metadata"]["name"]
            assert all("valueFrom" not in item or "secretKeyRef" not in item["valueFrom"] for item in env.values())


def test_each_secret_is_a_file_named_by_its_file_variable(docs):
    console = pod_spec(deployment(docs, "console"))
    env = {item["name"]: item.get("value") for item in console["containers"][0]["env"]}
    mount = next(m for m in console["containers"][0]["volumeMounts"] if m["name"] == "secrets")
    (volume,) = [v for v in console["volumes"] if v["name"] == "secrets"]
    keys = {item["key"] for item in volume["secret"]["items"]}
    assert keys >= {"SECRET_KEY", "SWITCHYARD_KEY_PEPPER", "SWITCHYARD_AUDIT_SIGNING_KEY", "DATABASE_URL", "REDIS_URL"}
    assert {f"{key}_FILE": f"{mount['mountPath']}/{key}" for key in keys}.items() <= env.items()
    assert mount["readOnly"] is True


def test_the_chart_secret_survives_an_uninstall_and_names_the_trial_services(rendered):
    secret = named(rendered["trial"], "Secret", "switchyard")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data["DATABASE_URL"] == f"postgres://switchyard:{data['POSTGRES_PASSWORD']}@switchyard-postgresql:5432/switchyard"
    assert data["REDIS_URL"] == f"redis://:{data['REDIS_PASSWORD']}@switchyard-redis:6379/0"
    assert all(len(data[key]) >= 50 for key in ("SECRET_KEY", "SWITCHYARD_KEY_PEPPER", "SWITCHYARD_AUDIT_SIGNING_KEY"))


def test_gateway_pods_carry_the_labels_the_engine_network_policy_selects(docs):
    gateway = deployment(docs, "gateway")
    assert GATEWAY_LABELS.items() <= gateway["spec"]["template"]["metadata"]["labels"].items()
    assert gateway["spec"]["selector"]["matchLabels"] == GATEWAY_LABELS
    backends = json.loads(named(docs, "ConfigMap", "switchyard")["data"]["SWITCHYARD_RUNTIME_BACKENDS"])
    options = backends["kubernetes"]["options"]
    assert options["client_labels"][0] == GATEWAY_LABELS and options["control_namespace"] == NAMESPACE
    assert options["namespace_prefix"] == "switchyard"
    # The contract with the backend: the options the chart renders are the ones it takes.
    from fleet.runtime.kubernetes.options import KubernetesOptions

    parsed = KubernetesOptions.parse(options)
    assert parsed.in_cluster and parsed.fetch_image.startswith("ghcr.io/") or parsed.fetch_image
    assert backends["local"] is None and backends["simulator"] is None  # engines in the worker pod: unreachable


def test_every_container_runs_locked_down_with_resources(docs):
    for workload in objects(docs, "Deployment") + objects(docs, "Job"):
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] >= 10000
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in all_containers(workload):
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
            assert set(container["resources"]) == {"requests", "limits"}


def test_var_and_tmp_are_writable_volumes_under_a_read_only_root(docs):
    for component in COMPONENTS:
        spec = pod_spec(deployment(docs, component))
        mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert "emptyDir" in volumes[mounts["/var/lib/switchyard"]] and "emptyDir" in volumes[mounts["/tmp"]]


def test_console_and_gateway_are_probed_on_healthz(docs):
    for component in ("console", "gateway"):
        container = pod_spec(deployment(docs, component))["containers"][0]
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["path"] == "/healthz"
    console = pod_spec(deployment(docs, "console"))["containers"][0]
    host = console["readinessProbe"]["httpGet"]["httpHeaders"] == [{"name": "Host", "value": "localhost"}]
    allowed = named(docs, "ConfigMap", "switchyard")["data"]["ALLOWED_HOSTS"].split(",")
    assert host and "localhost" in allowed  # else Django answers the kubelet 400 (DisallowedHost)


def test_gateway_metrics_have_their_own_port_apart_from_the_public_one(docs):
    gateway = deployment(docs, "gateway")
    container = pod_spec(gateway)["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8001, "metrics": 9101}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SWITCHYARD_GATEWAY_METRICS_PORT"] == "9101"
    assert env["SWITCHYARD_GATEWAY_METRICS_HOST"] == "0.0.0.0"  # the pod's address: Prometheus scrapes it there
    for probe in ("readinessProbe", "livenessProbe"):  # probes stay on the public port's /healthz
        assert container[probe]["httpGet"] == {**container[probe]["httpGet"], "path": "/healthz", "port": "http"}
    annotations = gateway["spec"]["template"]["metadata"]["annotations"]
    assert (annotations["prometheus.io/port"], annotations["prometheus.io/path"]) == ("9101", "/metrics")
    service = named(docs, "Service", "switchyard-gateway")
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        "http": (8001, "http"), "metrics": (9101, "metrics")}


def test_only_the_allowed_peers_reach_the_gateway_metrics_port(rendered):
    policy = named(rendered["default"], "NetworkPolicy", "switchyard-gateway")
    rules = {tuple(p["port"] for p in rule["ports"]): rule.get("from") for rule in policy["spec"]["ingress"]}
    assert rules[(8001,)] is None  # the public port: from anywhere
    assert rules[(9101,)] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    for name in ("production", "trial"):
        ingress = objects(rendered[name], "Ingress")
        backends = [path["backend"]["service"]["port"] for i in ingress for rule in i["spec"]["rules"]
                    for path in rule["http"]["paths"]]
        assert all(port == {"name": "http"} for port in backends)


def test_the_hpa_owns_gateway_replicas_only_when_enabled(rendered):
    assert deployment(rendered["default"], "gateway")["spec"]["replicas"] >= 2
    assert not objects(rendered["default"], "HorizontalPodAutoscaler")
    assert "replicas" not in deployment(rendered["production"], "gateway")["spec"]
    (hpa,) = objects(rendered["production"], "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "switchyard-gateway" and hpa["spec"]["minReplicas"] >= 2


def test_ingress_sends_v1_to_the_gateway_and_the_rest_to_the_console(rendered):
    (rule,) = named(rendered["production"], "Ingress", "switchyard")["spec"]["rules"]
    routes = {p["path"]: p["backend"]["service"]["name"] for p in rule["http"]["paths"]}
    assert routes == {"/v1": "switchyard-gateway", "/": "switchyard-console"}
    allowed = named(rendered["production"], "ConfigMap", "switchyard")["data"]["ALLOWED_HOSTS"].split(",")
    assert rule["host"] in allowed


def test_trial_database_and_redis_are_off_by_default(rendered):
    assert {d["metadata"]["name"] for d in objects(rendered["default"], "Deployment")} == {
        f"switchyard-{c}" for c in COMPONENTS}
    trial = {d["metadata"]["name"] for d in objects(rendered["trial"], "Deployment")}
    assert {"switchyard-postgresql", "switchyard-redis"} <= trial


def test_values_files_say_what_every_top_level_key_is_for():
    """A values reference that drifts from values.yaml is caught: docs/kubernetes.md names every key."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    docs = (CHART.parents[2] / "docs" / "kubernetes.md").read_text()
    missing = [key for key in values if f"`{key}" not in docs]
    assert not missing, f"docs/kubernetes.md does not describe: {missing}"
