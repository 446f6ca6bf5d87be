"""A small stand-in for the Kubernetes API server, on loopback, for the kubernetes backend's tests.

It answers the paths our client calls with real API object shapes: server-side apply (PATCH with
`application/apply-patch+yaml`, a field manager and force), GET of one object, cluster-wide LIST
with equality label selectors, WATCH of pods as a chunked stream of JSON lines from a
resourceVersion (410 Gone when it is too old), DELETE, and a pod's log. A ResourceQuota's `pods`
is enforced (403 "exceeded quota"), and applying a LeaderWorkerSet creates its group's pods, as
its controller would. Tests script the rest: a pod becoming ready, being evicted or failing,
an answer of 409/429/500, a watch dropped mid-stream.

It checks our calls and our reactions, not Kubernetes: no scheduling, no admission, no merge of
field ownership beyond replacing the applied object.
"""
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

CORE = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<plural>[a-z]+)/(?P<name>[^/]+)(?P<log>/log)?$")
GROUPED = re.compile(r"^/apis/(?P<group>[a-z0-9.-]+)/(?P<version>v1)/namespaces/(?P<ns>[^/]+)/(?P<plural>[a-z]+)"
                     r"/(?P<name>[^/]+)$")
NAMESPACE = re.compile(r"^/api/v1/namespaces/(?P<name>[^/]+)$")
KIND_OF = {"pods": "Pod", "services": "Service", "resourcequotas": "ResourceQuota", "limitranges": "LimitRange",
           "networkpolicies": "NetworkPolicy", "poddisruptionbudgets": "PodDisruptionBudget",
           "leaderworkersets": "LeaderWorkerSet", "namespaces": "Namespace"}
LWS_OWNER = "leaderworkerset.sigs.k8s.io/name"


class FakeKubernetes:
    """The API's state, the calls it received, and the knobs tests turn."""

    def __init__(self):
        self.lock = threading.Condition()
        self.objects: dict[tuple[str, str, str], dict] = {}  # (kind, namespace, name) → object
        self.events: list[tuple[int, str, dict]] = []  # (resourceVersion, type, pod)
        self.version = 100
        self.oldest_watchable = 0
        self.calls: list[dict] = []
        self.faults: list[dict] = []
        self.log_lines: dict[str, str] = {}
        self.watch_generation = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        with self.lock:
            self.watch_generation += 1
            self.lock.notify_all()
        self.server.shutdown()
        self.server.server_close()

    # --- what tests script ------------------------------------------------------------------------------

    def fail_next(self, method: str, path_pattern: str, status: int, *, times: int = 1, retry_after: str = "") -> None:
        """The next `times` calls of `method` on a path matching `path_pattern` answer `status`."""
        with self.lock:
            self.faults.append({"method": method, "pattern": re.compile(path_pattern), "status": status,
                                "times": times, "retry_after": retry_after})

    def set_pod_status(self, namespace: str, name: str, *, ready: bool | None = None, phase: str | None = None,
                       reason: str = "", message: str = "", terminated: dict | None = None) -> None:
        with self.lock:
            pod = self.objects[("Pod", namespace, name)]
            status = pod.setdefault("status", {})
            if phase:
                status["phase"] = phase
            if reason:
                status["reason"], status["message"] = reason, message
            if ready is not None:
                status["phase"] = status.get("phase") if phase else "Running"
                status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
            if terminated is not None:
                status["containerStatuses"] = [{"name": "engine", "state": {"terminated": terminated}}]
            self._changed("MODIFIED", pod)

    def delete_behind_our_back(self, namespace: str, name: str) -> None:
        with self.lock:
            pod = self.objects.pop(("Pod", namespace, name))
            self._changed("DELETED", pod)

    def drop_watches(self) -> None:
        """End every open watch stream now (a load balancer timing it out, a restarted API server)."""
        with self.lock:
            self.watch_generation += 1
            self.lock.notify_all()

    def compact(self) -> None:
        """Forget old events: a watch from before now gets 410 Gone."""
        with self.lock:
            self.oldest_watchable = self.version

    def of_kind(self, kind: str) -> list[dict]:
        with self.lock:
            return [obj for (k, _, _), obj in sorted(self.objects.items()) if k == kind]

    def applied(self) -> list[dict]:
        return [call for call in self.calls if call["method"] == "PATCH"]

    # --- the API -------------------------------------------------------------------------------------------

    def _changed(self, kind: str, obj: dict) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        if obj["kind"] == "Pod":
            self.events.append((self.version, kind, json.loads(json.dumps(obj))))
            self.lock.notify_all()

    def _fault(self, method: str, path: str) -> dict | None:
        for fault in self.faults:
            if fault["method"] == method and fault["pattern"].search(path) and fault["times"] > 0:
                fault["times"] -= 1
                return fault
        return None

    def apply(self, kind: str, namespace: str, name: str, body: dict, query: dict) -> tuple[int, dict]:
        if not query.get("fieldManager") or not _true(query, "force"):
            return 400, _status(400, "apply needs fieldManager and force=true", "BadRequest")
        if body.get("kind") != kind or body["metadata"].get("name") != name:
            return 400, _status(400, f"body names {body.get('kind')}/{body['metadata'].get('name')}", "BadRequest")
        key = (kind, namespace, name)
        existing = self.objects.get(key)
        if kind == "Pod" and existing is None:
            refused = self._over_quota(namespace)
            if refused:
                return 403, _status(403, refused, "Forbidden")
        obj = json.loads(json.dumps(body))
        meta = obj["metadata"]
        if existing is not None:
            meta["uid"] = existing["metadata"]["uid"]
            meta["creationTimestamp"] = existing["metadata"]["creationTimestamp"]
            if "status" in existing:
                obj["status"] = existing["status"]
        else:
            meta["uid"], meta["creationTimestamp"] = str(uuid.uuid4()), time.strftime("%Y-%m-%dT%H:%M:%SZ")
            if kind == "Pod":
                obj["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
        meta["managedFields"] = [{"manager": query["fieldManager"][0], "operation": "Apply"}]
        self.objects[key] = obj
        self._changed("ADDED" if existing is None else "MODIFIED", obj)
        if kind == "LeaderWorkerSet" and existing is None:
            self._start_group(obj)
        return 200, obj

    def _over_quota(self, namespace: str) -> str:
        quota = self.objects.get(("ResourceQuota", namespace, "switchyard-quota"))
        if quota is None:
            return ""
        limit = int(quota["spec"]["hard"].get("pods", "1000000"))
        used = sum(1 for (k, ns, _) in self.objects if k == "Pod" and ns == namespace)
        if used + 1 > limit:
            return (f"pods is forbidden: exceeded quota: switchyard-quota, requested: pods=1, used: pods={used}, "
                    f"limited: pods={limit}")
        return ""

    def _start_group(self, lws: dict) -> None:
        template = lws["spec"]["leaderWorkerTemplate"]
        ns, name = lws["metadata"]["namespace"], lws["metadata"]["name"]
        owner = [{"apiVersion": lws["apiVersion"], "kind": "LeaderWorkerSet", "name": name,
                  "uid": lws["metadata"]["uid"]}]
        for index in range(template["size"]):
            role = template["leaderTemplate"] if index == 0 else template["workerTemplate"]
            pod_name = f"{name}-0" if index == 0 else f"{name}-0-{index}"
            labels = {**role["metadata"]["labels"], LWS_OWNER: name}
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": pod_name, "namespace": ns, "labels": labels, "ownerReferences": owner,
                "uid": str(uuid.uuid4()), "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ")},
                "spec": role["spec"], "status": {"phase": "Pending"}}
            self.objects[("Pod", ns, pod_name)] = pod
            self._changed("ADDED", pod)

    def delete(self, kind: str, namespace: str, name: str) -> tuple[int, dict]:
        obj = self.objects.pop((kind, namespace, name), None)
        if obj is None:
            return 404, _status(404, f'{kind.lower()}s "{name}" not found', "NotFound")
        self._changed("DELETED", obj)
        if kind == "LeaderWorkerSet":
            for key, pod in list(self.objects.items()):
                if key[0] == "Pod" and pod["metadata"].get("labels", {}).get(LWS_OWNER) == name:
                    del self.objects[key]
                    self._changed("DELETED", pod)
        return 200, _status(200, "deleted", "")

    def select(self, kind: str, selector: str) -> list[dict]:
        wanted = dict(part.split("=", 1) for part in selector.split(",") if part) if selector else {}
        return [obj for (k, _, _), obj in sorted(self.objects.items())
                if k == kind and all(obj["metadata"].get("labels", {}).get(a) == b for a, b in wanted.items())]


def _true(query: dict, name: str) -> bool:
    """A boolean query parameter as the API server reads it (Go's ParseBool: the Python client sends "True")."""
    return query.get(name, [""])[0] in ("1", "t", "T", "true", "True", "TRUE")


def _status(code: int, message: str, reason: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure" if code >= 400 else "Success",
            "message": message, "reason": reason, "code": code}


def _handler(api: FakeKubernetes):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _route(self, method: str):
            parts = urlsplit(self.path)
            query = parse_qs(parts.query)
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            with api.lock:
                api.calls.append({"method": method, "path": parts.path, "query": query, "body": body,
                                  "content_type": self.headers.get("content-type", "")})
                fault = api._fault(method, parts.path)
            if fault:
                headers = {"Retry-After": fault["retry_after"]} if fault["retry_after"] else {}
                return self._send(fault["status"], _status(fault["status"], "injected", "Injected"), headers)
            if method == "GET" and _true(query, "watch"):
                return self._watch(parts.path, query)
            with api.lock:
                code, answer = self._answer(method, parts.path, query, body)
            if isinstance(answer, str):
                return self._send(code, answer.encode(), {}, content_type="text/plain")
            self._send(code, answer, {})

        def _answer(self, method, path, query, body):
            selector = query.get("labelSelector", [""])[0]
            if method == "GET" and path == "/api/v1/pods":
                return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(api.version)},
                             "items": api.select("Pod", selector)}
            if method == "GET" and path == "/apis/leaderworkerset.x-k8s.io/v1/leaderworkersets":
                return 200, {"kind": "LeaderWorkerSetList", "apiVersion": "leaderworkerset.x-k8s.io/v1",
                             "metadata": {"resourceVersion": str(api.version)}, "items": api.select("LeaderWorkerSet",
                                                                                                     selector)}
            match = NAMESPACE.match(path)
            if match:
                return self._object(method, "Namespace", "", match["name"], query, body)
            match = CORE.match(path) or GROUPED.match(path)
            if not match or match["plural"] not in KIND_OF:
                return 404, _status(404, f"no route {method} {path}", "NotFound")
            if match.groupdict().get("log"):
                pod = api.objects.get(("Pod", match["ns"], match["name"]))
                if pod is None:
                    return 404, _status(404, "pod not found", "NotFound")
                lines = api.log_lines.get(match["name"], "").splitlines()
                tail = int(query.get("tailLines", ["0"])[0]) or len(lines)
                return 200, "\n".join(lines[-tail:])
            return self._object(method, KIND_OF[match["plural"]], match["ns"], match["name"], query, body)

        def _object(self, method, kind, namespace, name, query, body):
            if method == "PATCH":
                if self.headers.get("content-type") != "application/apply-patch+yaml":
                    return 415, _status(415, "only server-side apply is served here", "UnsupportedMediaType")
                return api.apply(kind, namespace, name, body, query)
            if method == "DELETE":
                return api.delete(kind, namespace, name)
            found = api.objects.get((kind, namespace, name))
            return (200, found) if found is not None else (404, _status(404, f"{name} not found", "NotFound"))

        def _send(self, code: int, payload, headers: dict, content_type: str = "application/json"):
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _watch(self, path: str, query: dict):
            since = int(query.get("resourceVersion", ["0"])[0] or 0)
            selector = dict(p.split("=", 1) for p in query.get("labelSelector", [""])[0].split(",") if p)
            deadline = time.monotonic() + int(query.get("timeoutSeconds", ["30"])[0])
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            with api.lock:
                generation = api.watch_generation
                if since and since < api.oldest_watchable:
                    self._chunk({"type": "ERROR", "object": _status(410, "too old resource version", "Expired")})
                    return self._chunk(None)
            while time.monotonic() < deadline:
                with api.lock:
                    if api.watch_generation != generation:
                        break
                    fresh = [(v, t, o) for v, t, o in api.events if v > since and all(
                        o["metadata"].get("labels", {}).get(a) == b for a, b in selector.items())]
                    if not fresh:
                        api.lock.wait(0.2)
                        continue
                for version, kind, obj in fresh:
                    self._chunk({"type": kind, "object": obj})
                    since = version
            self._chunk(None)

        def _chunk(self, event):
            data = b"" if event is None else json.dumps(event).encode() + b"\n"
            try:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            except OSError:
                pass

        def do_GET(self):
            self._route("GET")

        def do_PATCH(self):
            self._route("PATCH")

        def do_DELETE(self):
            self._route("DELETE")

    return Handler
