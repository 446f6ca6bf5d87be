"""Engine readiness and deaths from a watch on this install's pods (the production-stack shape).

List the pods (a full picture, and the resourceVersion to watch from), then watch; on every
event move the instance on: its pod became Ready → `ready` (routable at the gateway's next
snapshot refresh); failed, evicted, exited or deleted behind our back → `failed`, and the fleet
replaces it with back-off. A dropped watch is resumed from the last resourceVersion; a 410 (too
old) or an error relists. The relist also fails what the events cannot show: an instance whose
workload is missing, or one not ready within its start-up deadline (unschedulable, image pulls).

Pods of a LeaderWorkerSet give readiness through their leader; the set itself restarts its group,
so only a missing set fails such an instance.
"""
import json
import logging
import threading
from datetime import timedelta

from django.db import close_old_connections
from django.utils import timezone
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from fleet.runtime.kubernetes import names
from fleet.runtime.kubernetes.cluster import ClusterUnavailable
from fleet.states import InstanceState

logger = logging.getLogger(__name__)
S = InstanceState
WATCH_SECONDS = 60  # the server ends each watch after this; we relist then (cheap, and it heals any drift)
ERROR_PAUSE_SECONDS = 2.0
LISTED_SLACK = timedelta(seconds=30)  # a workload created this recently may be missing from a list taken before it


def pod_condition(pod: dict) -> tuple[str, str]:
    """("ready" | "waiting" | "failed" | "gone", why) for one pod as the API server describes it."""
    meta, status = pod.get("metadata", {}), pod.get("status", {})
    if meta.get("deletionTimestamp"):
        return "gone", "its pod is being deleted"
    phase = status.get("phase", "")
    if phase in ("Failed", "Succeeded"):
        return "failed", _failure(status, phase)
    terminated = _terminated(status)
    if terminated:
        return "failed", terminated
    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", [])):
        return "ready", ""
    return "waiting", _waiting(status)


def _failure(status: dict, phase: str) -> str:
    reason = status.get("reason") or ""  # Evicted, Preempting, DeadlineExceeded …
    message = status.get("message") or ""
    detail = _terminated(status) or "the engine exited"
    head = f"pod {reason.lower()}" if reason else f"pod {phase.lower()}"
    return f"{head}: {message or detail}"[:500]


def _terminated(status: dict) -> str:
    for container in status.get("containerStatuses", []):
        done = (container.get("state") or {}).get("terminated")
        if done:
            return (f"container {container.get('name')} terminated: {done.get('reason') or 'Error'} "
                    f"(exit code {done.get('exitCode')}) {done.get('message') or ''}").strip()[:500]
    return ""


def _waiting(status: dict) -> str:
    for container in status.get("containerStatuses", []):
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason')}: {waiting.get('message') or ''}".strip(": ")[:300]
    for condition in status.get("conditions", []):
        if condition.get("status") == "False" and condition.get("message"):
            return f"{condition.get('reason')}: {condition['message']}"[:300]
    return status.get("phase", "Pending")


class PodObserver:
    """Follows one Kubernetes backend's engines until `stop` is set."""

    def __init__(self, backend_name: str, backend):
        self.backend_name, self.backend = backend_name, backend
        self.resource_version = ""

    @property
    def selector(self) -> str:
        from fleet.install import install_id

        return names.selector({names.INSTALL: install_id(), names.COMPONENT: names.ENGINE_COMPONENT})

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                close_old_connections()
                if not self.resource_version:
                    self.relist()
                self.watch_once(stop)
            except (ClusterUnavailable, ApiException, OSError, ValueError) as exc:
                logger.warning("pod watch of %s interrupted (%s); relisting", self.backend_name, exc)
                self.resource_version = ""
                stop.wait(ERROR_PAUSE_SECONDS)

    def relist(self) -> None:
        """Act on every pod as it is now, then fail instances whose workload is missing or too slow."""
        listed_at = timezone.now()
        pods = self.backend.cluster.list_pods(self.selector)
        seen = set()
        for pod in pods.get("items", []):
            seen.add(self.handle("LISTED", pod))
        self.resource_version = pods.get("metadata", {}).get("resourceVersion", "")
        self.fail_the_missing(seen, listed_at)

    def watch_once(self, stop: threading.Event) -> None:
        response = self.backend.cluster.watch_pods(self.selector, self.resource_version, WATCH_SECONDS)
        try:
            for line in iter_resp_lines(response):
                if stop.is_set():
                    return
                if line:
                    self.on_event(json.loads(line))
        finally:
            response.release_conn()
        self.resource_version = ""  # the watch ended: relist (and catch up on anything missed)

    def on_event(self, event: dict) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":  # e.g. 410 Gone: our resourceVersion is too old
            raise ValueError(f"watch error: {obj.get('message') or obj}")
        self.resource_version = obj.get("metadata", {}).get("resourceVersion", self.resource_version)
        if kind != "BOOKMARK":
            self.handle(kind, obj)

    def handle(self, kind: str | None, pod: dict) -> int:
        """Move the pod's instance on; returns the instance id (0 when the pod names none)."""
        from fleet.models import Instance
        from fleet.transitions import fail_instance, record_probe, try_transition

        labels = pod.get("metadata", {}).get("labels", {})
        try:
            instance_id = int(labels.get(names.INSTANCE, "0"))
        except ValueError:
            return 0
        in_group = bool(pod.get("metadata", {}).get("ownerReferences"))
        if in_group and labels.get("switchyard.dev/role") != "leader":
            return instance_id  # a LeaderWorkerSet's worker: its leader speaks for the group
        instance = (Instance.objects.filter(pk=instance_id, deployment__runtime_backend=self.backend_name)
                    .only("pk", "state").first())
        if instance is None or instance.state not in (S.STARTING, S.READY):
            return instance_id
        condition, why = ("gone", "its pod was deleted") if kind == "DELETED" else pod_condition(pod)
        if condition in ("failed", "gone") and not in_group:
            fail_instance(instance.pk, f"{why} ({pod['metadata'].get('namespace')}/{pod['metadata'].get('name')})")
        elif condition == "ready":
            record_probe(instance.pk, ok=True)
            if instance.state == S.STARTING:
                try_transition(instance.pk, S.READY)
        elif condition == "waiting":
            record_probe(instance.pk, ok=False, error=why)
        return instance_id

    def fail_the_missing(self, seen: set[int], listed_at) -> None:
        from fleet.models import Instance
        from fleet.transitions import fail_instance

        now = timezone.now()
        deadline = timedelta(seconds=self.backend.start_deadline_seconds)
        groups = set(self.backend.running()) if self.backend.options.multi_node else set()
        for instance in Instance.objects.filter(state__in=(S.STARTING, S.READY),
                                                deployment__runtime_backend=self.backend_name):
            kind = (instance.runtime_handle or {}).get("kind", "Pod")
            present = instance.pk in (groups if kind == "LeaderWorkerSet" else seen)
            if not present and instance.starting_at and instance.starting_at < listed_at - LISTED_SLACK:
                fail_instance(instance.pk, f"its {kind} is gone from the cluster")
            elif instance.state == S.STARTING and instance.starting_at and now - instance.starting_at > deadline:
                fail_instance(instance.pk, f"not ready within {deadline.total_seconds():.0f} s: "
                                           f"{instance.last_health_error or 'no reason given'}")
