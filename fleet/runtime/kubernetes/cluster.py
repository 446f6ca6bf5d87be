"""The calls the backend makes to the Kubernetes API, through the official client.

Objects are server-side applied (`application/apply-patch+yaml`) with this install's field
manager and `force`, so a re-apply after a crash is a no-op and our fields stay ours. Every call
carries a timeout. Transient answers (429, 5xx, a dropped connection) are retried a few times,
honouring Retry-After; what still fails raises `ClusterUnavailable`. Answers are plain dicts
(`_preload_content=False`), as the API server sent them.
"""
import json
import logging
import time

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from fleet.runtime.kubernetes.options import KubernetesOptions

logger = logging.getLogger(__name__)
APPLY = "application/apply-patch+yaml"
TRANSIENT = frozenset({429, 500, 502, 503, 504})
ATTEMPTS = 3
MAX_RETRY_AFTER = 2.0
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")


class ClusterUnavailable(Exception):
    """The API server did not answer usefully after retries (or refused for a reason that may pass)."""


class QuotaExceeded(Exception):
    """The namespace's ResourceQuota refused the object: there is no room for it now."""


# kind → (API class, method stem, namespaced)
KINDS = {
    "Namespace": ("CoreV1Api", "namespace", False),
    "ResourceQuota": ("CoreV1Api", "namespaced_resource_quota", True),
    "LimitRange": ("CoreV1Api", "namespaced_limit_range", True),
    "Service": ("CoreV1Api", "namespaced_service", True),
    "Pod": ("CoreV1Api", "namespaced_pod", True),
    "NetworkPolicy": ("NetworkingV1Api", "namespaced_network_policy", True),
    "PodDisruptionBudget": ("PolicyV1Api", "namespaced_pod_disruption_budget", True),
}


class Cluster:
    """One API server, reached as the backend's options say (built on first use, not at import)."""

    def __init__(self, options: KubernetesOptions, field_manager: str):
        self.options, self.field_manager = options, field_manager
        self._client: k8s.ApiClient | None = None

    @property
    def api_client(self) -> k8s.ApiClient:
        if self._client is None:
            self._client = k8s.ApiClient(self._configuration())
        return self._client

    def _configuration(self) -> k8s.Configuration:
        configuration = k8s.Configuration()
        if self.options.host:
            configuration.host = self.options.host
        elif self.options.in_cluster:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(config_file=self.options.kubeconfig or None,
                                        context=self.options.context or None, client_configuration=configuration)
        return configuration

    def api(self, name: str):
        return getattr(k8s, name)(self.api_client)

    @property
    def timeout(self) -> tuple[float, float]:
        return (min(self.options.request_timeout_seconds, 5.0), self.options.request_timeout_seconds)

    # --- calls ---------------------------------------------------------------------------------------

    def apply(self, obj: dict) -> dict:
        """Server-side apply one object; returns it as the server stored it."""
        name, namespace = obj["metadata"]["name"], obj["metadata"].get("namespace")
        common = {"field_manager": self.field_manager, "force": True, "_content_type": APPLY}
        if obj["kind"] == "LeaderWorkerSet":
            return self._call(self.api("CustomObjectsApi").patch_namespaced_custom_object,
                              *LWS[:2], namespace, LWS[2], name, obj, **common)
        api, stem, namespaced = KINDS[obj["kind"]]
        method = getattr(self.api(api), f"patch_{stem}")
        args = (name, namespace, obj) if namespaced else (name, obj)
        return self._call(method, *args, **common)

    def read(self, kind: str, namespace: str, name: str) -> dict | None:
        """The object, or None when it does not exist."""
        try:
            if kind == "LeaderWorkerSet":
                return self._call(self.api("CustomObjectsApi").get_namespaced_custom_object,
                                  *LWS[:2], namespace, LWS[2], name)
            api, stem, _ = KINDS[kind]
            return self._call(getattr(self.api(api), f"read_{stem}"), name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def delete(self, kind: str, namespace: str, name: str, grace_seconds: int) -> None:
        """Delete (gone already is fine); pods get `grace_seconds` to finish their requests."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": int(grace_seconds),
                "propagationPolicy": "Background"}
        try:
            if kind == "LeaderWorkerSet":
                self._call(self.api("CustomObjectsApi").delete_namespaced_custom_object,
                           *LWS[:2], namespace, LWS[2], name, body=body)
                return
            api, stem, _ = KINDS[kind]
            self._call(getattr(self.api(api), f"delete_{stem}"), name, namespace, body=body)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def list_pods(self, label_selector: str) -> dict:
        """Pods of every namespace matching the selector (a PodList, with its resourceVersion)."""
        return self._call(self.api("CoreV1Api").list_pod_for_all_namespaces, label_selector=label_selector)

    def list_worker_sets(self, label_selector: str) -> dict:
        return self._call(self.api("CustomObjectsApi").list_cluster_custom_object, *LWS,
                          label_selector=label_selector)

    def pod_log(self, namespace: str, name: str, lines: int) -> str:
        try:
            response = self._raw(self.api("CoreV1Api").read_namespaced_pod_log, name, namespace,
                                 tail_lines=lines, container="engine")
            return response.data.decode(errors="replace")
        except ApiException as exc:
            if exc.status in (400, 404):  # no such pod, or its container never started
                return ""
            raise

    def watch_pods(self, label_selector: str, resource_version: str, timeout_seconds: int):
        """The raw watch response (JSON lines) of pods matching the selector, from `resource_version`."""
        return self.api("CoreV1Api").list_pod_for_all_namespaces(
            label_selector=label_selector, resource_version=resource_version, watch=True,
            allow_watch_bookmarks=True, timeout_seconds=timeout_seconds, _preload_content=False,
            _request_timeout=(self.timeout[0], timeout_seconds + 10))

    # --- plumbing ------------------------------------------------------------------------------------

    def _call(self, method, *args, **kwargs) -> dict:
        response = self._raw(method, *args, **kwargs)
        return json.loads(response.data or b"{}")

    def _raw(self, method, *args, **kwargs):
        """Call with retries of transient failures; ApiException for a definite refusal."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return method(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
            except ApiException as exc:
                if exc.status == 403 and "exceeded quota" in (exc.body or ""):
                    raise QuotaExceeded(_message(exc)) from None
                if exc.status not in TRANSIENT:
                    raise
                if attempt == ATTEMPTS:
                    raise ClusterUnavailable(f"the Kubernetes API answered {exc.status}: {_message(exc)}") from None
                time.sleep(_retry_after(exc, attempt))
            except (Urllib3Error, OSError) as exc:
                if attempt == ATTEMPTS:
                    raise ClusterUnavailable(f"the Kubernetes API is unreachable: {exc}") from None
                time.sleep(0.2 * attempt)
        raise AssertionError("unreachable")


def _retry_after(exc: ApiException, attempt: int) -> float:
    try:
        return min(float((exc.headers or {}).get("Retry-After", "")), MAX_RETRY_AFTER)
    except ValueError:
        return 0.2 * attempt


def _message(exc: ApiException) -> str:
    """The Status message the API server sent, else the reason phrase."""
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)[:300]
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)[:300]
