"""The API client of the harness: synchronous JSON access to kube-apiserver as cluster admin.

:class:`Api` wraps ``httpx`` with the admin client certificate of a :class:`Cluster`: plain
``get``/``post``/``patch``/``delete`` on API paths (an answer of 400 or more raises
AssertionError naming the request), and the objects tests create and read (namespaces, pods,
PodGroups, nodes, events, ServiceAccount tokens). It checks nothing: the waits are in
``waits.py``, the invariants in ``invariants.py``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any

import httpx

from e2e.harness import tokens
from e2e.harness.cluster import Cluster
from tests.support.manifests import HOSTNAME, pod, pod_group


class Api:
    """Synchronous JSON access to the API server as cluster admin; safe to share between threads.

    Each thread gets its own ``httpx.Client`` and SSL context: httpcore sets the ALPN protocols
    on the context for every new connection, and two threads doing so on one shared context
    can send a malformed ClientHello (the API server answers with a TLS decode_error alert).
    """

    def __init__(self, cluster: Cluster, timeout: float = 30.0) -> None:
        self.cluster = cluster
        self.timeout = timeout
        """Seconds each request may take (a test that pauses the API server waits longer)."""
        self._local = threading.local()
        self._clients: list[httpx.Client] = []
        self._lock = threading.Lock()

    @property
    def http(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            client = httpx.Client(
                base_url=self.cluster.server, verify=self.cluster._ssl_context(), timeout=self.timeout
            )
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for c in clients:
            c.close()

    def _check(self, r: httpx.Response) -> Any:
        if r.status_code >= 400:
            raise AssertionError(f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text[:300]}")
        return r.json() if r.content else None

    def get(self, path: str, **params: str) -> Any:
        return self._check(self.http.get(path, params=params))

    def try_get(self, path: str) -> Any | None:
        r = self.http.get(path)
        return None if r.status_code == 404 else self._check(r)

    def post(self, path: str, body: Any) -> Any:
        return self._check(self.http.post(path, json=body))

    def delete(self, path: str) -> None:
        r = self.http.delete(path)
        if r.status_code not in (200, 202, 404):
            self._check(r)

    def patch(self, path: str, body: Any, ctype: str = "application/merge-patch+json") -> Any:
        return self._check(self.http.patch(path, content=_json(body), headers={"Content-Type": ctype}))

    # ---- objects ----------------------------------------------------------------------

    def create_namespace(self, name: str) -> None:
        self.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def delete_namespace(self, name: str, wait: float = 0.0) -> None:
        """Delete a namespace; with ``wait`` > 0, wait up to that many seconds until it is gone
        (its pods deleted), so its clean-up does not bleed into the next test's events."""
        self.delete(f"/api/v1/namespaces/{name}")
        deadline = time.monotonic() + wait
        while wait and time.monotonic() < deadline:
            if self.try_get(f"/api/v1/namespaces/{name}") is None:
                return
            time.sleep(0.2)

    def create_pod(self, pod: Mapping[str, Any]) -> Any:
        ns = pod["metadata"]["namespace"]
        return self.post(f"/api/v1/namespaces/{ns}/pods", pod)

    def delete_pod(self, ns: str, name: str, grace: int = 0) -> None:
        self.delete(f"/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds={grace}")

    def ungate(self, ns: str, name: str) -> Any:
        """Remove every scheduling gate of a pod (the only change the API allows on gates)."""
        return self.patch(
            f"/api/v1/namespaces/{ns}/pods/{name}",
            [{"op": "remove", "path": "/spec/schedulingGates"}],
            ctype="application/json-patch+json",
        )

    def metrics_token(self, name: str = "metrics-reader", namespace: str = "default", allowed: bool = True) -> str:
        """A real token of a ServiceAccount that may (or may not) ``get`` the ``/metrics`` path."""
        if self.try_get(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}") is None:
            self.post(
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            )
        if allowed:
            rbac = "/apis/rbac.authorization.k8s.io/v1"
            if self.try_get(f"{rbac}/clusterroles/e2e-metrics-reader") is None:
                self.post(
                    f"{rbac}/clusterroles",
                    {
                        "apiVersion": "rbac.authorization.k8s.io/v1",
                        "kind": "ClusterRole",
                        "metadata": {"name": "e2e-metrics-reader"},
                        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
                    },
                )
            crb = f"e2e-metrics-reader-{namespace}-{name}"
            if self.try_get(f"{rbac}/clusterrolebindings/{crb}") is None:
                self.post(
                    f"{rbac}/clusterrolebindings",
                    {
                        "apiVersion": "rbac.authorization.k8s.io/v1",
                        "kind": "ClusterRoleBinding",
                        "metadata": {"name": crb},
                        "roleRef": {
                            "apiGroup": "rbac.authorization.k8s.io",
                            "kind": "ClusterRole",
                            "name": "e2e-metrics-reader",
                        },
                        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
                    },
                )
        return self.request_token(name, namespace)

    def request_token(self, name: str, namespace: str = "default", seconds: int = 3600) -> str:
        """A token of ServiceAccount ``namespace/name`` valid ``seconds`` (a TokenRequest), recorded
        in ``e2e.harness.tokens`` (no log may hold it)."""
        tr = self.post(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}},
        )
        return tokens.remember(str(tr["status"]["token"]))

    def pod(self, ns: str, name: str) -> Any:
        return self.get(f"/api/v1/namespaces/{ns}/pods/{name}")

    def pods(self, ns: str, selector: str | None = None) -> list[Any]:
        params = {"labelSelector": selector} if selector else {}
        return list(self.get(f"/api/v1/namespaces/{ns}/pods", **params)["items"])

    def ensure_priority_classes(self, classes: Mapping[str, tuple[int, str | None]]) -> None:
        """Create each PriorityClass ``name -> (value, preemptionPolicy or None)`` that does not exist
        yet (PriorityClasses are cluster-wide and immutable: a module's classes outlive it)."""
        for name, (value, policy) in classes.items():
            if self.try_get(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}") is not None:
                continue
            body: dict[str, Any] = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
            if policy:
                body["preemptionPolicy"] = policy
            self.post("/apis/scheduling.k8s.io/v1/priorityclasses", body)

    def create_pod_group(self, pg: Mapping[str, Any]) -> Any:
        ns = pg["metadata"]["namespace"]
        return self.post(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups", pg)

    def create_gang(self, ns: str, size: int, topology_key: str, *, name: str = "g") -> list[str]:
        """Create PodGroup ``name`` (minMember ``size``, domain label key ``topology_key``), then its
        members ``m0`` .. ``m<size-1>``, each needing a node of its own (required pod anti-affinity
        on the hostname). Returns the member names."""
        self.create_pod_group(pod_group(name, ns, size, topology_key=topology_key))
        members = [f"m{i}" for i in range(size)]
        for m in members:
            self.create_pod(pod(m, ns, gang=name, anti_affinity_on=HOSTNAME))
        return members

    def delete_pod_group(self, ns: str, name: str) -> None:
        self.delete(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/{name}")

    def patch_pod_group(self, ns: str, name: str, body: Any) -> Any:
        return self.patch(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/{name}", body)

    def create_node(self, node: Mapping[str, Any]) -> Any:
        return self.post("/api/v1/nodes", node)

    def delete_node(self, name: str) -> None:
        self.delete(f"/api/v1/nodes/{name}")

    def patch_node(self, name: str, body: Any) -> Any:
        return self.patch(f"/api/v1/nodes/{name}", body)

    def nodes(self, selector: str | None = None) -> list[Any]:
        params = {"labelSelector": selector} if selector else {}
        return list(self.get("/api/v1/nodes", **params)["items"])

    def events(self, ns: str, pod: str | None = None) -> list[Any]:
        items = self.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]
        if pod is not None:
            items = [e for e in items if e.get("regarding", {}).get("name") == pod]
        return list(items)

    def event_notes(self, ns: str, pod: str, reason: str) -> list[str]:
        return [str(e.get("note", "")) for e in self.events(ns, pod) if e.get("reason") == reason]


def _json(body: Any) -> bytes:
    return json.dumps(body).encode()
