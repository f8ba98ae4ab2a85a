"""Smoke test of the local control plane: apiserver, KCM, kube-scheduler, kwok and the CRD."""

from __future__ import annotations

import sys
import time
import uuid
from typing import Any

import pytest

from e2e.harness.cluster import CRD_NAME, K8S_VERSION, NOT_READY_TAINT, Cluster

pytestmark = pytest.mark.e2e

DEMO_NODES = {"gpu-a1", "gpu-a2", "gpu-b1", "gpu-b2"}


def _poll(what: str, fn: Any, timeout: float, interval: float = 0.5) -> Any:
    """Call ``fn`` until it returns a truthy value (returned) or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def test_apiserver_version(cluster: Cluster) -> None:
    assert cluster.api_json("/version")["gitVersion"] == K8S_VERSION


def test_demo_nodes_ready_and_untainted(cluster: Cluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in cluster.kubectl_json("get", "nodes")["items"]}
    assert DEMO_NODES <= set(nodes)
    for name in DEMO_NODES:
        node = nodes[name]
        conds = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert conds.get("Ready") == "True", name
        taints = [t["key"] for t in node["spec"].get("taints") or []]
        assert NOT_READY_TAINT not in taints, (name, taints)
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "1"
        assert node["metadata"]["labels"]["nvidia.com/gpu.clique"] in {"clique-a", "clique-b"}


def test_podgroup_crd_established(cluster: Cluster) -> None:
    crd = cluster.kubectl_json("get", "crd", CRD_NAME)
    conds = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conds.get("Established") == "True"


def test_deployment_runs_on_kwok_node_and_namespace_deletes(cluster: Cluster) -> None:
    """KCM creates the ReplicaSet and pod, kube-scheduler binds it, kwok makes it Running.

    Then deleting the namespace finishes (KCM namespace controller + kwok pod-delete stage).
    """
    ns = f"smoke-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", ns)
    cluster.apply(f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: smoke, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: smoke}}}}
  template:
    metadata: {{labels: {{app: smoke}}}}
    spec:
      containers:
      - name: pause
        image: registry.k8s.io/pause:3.10
        resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}
""")

    def running_pod() -> dict[str, Any] | None:
        for pod in cluster.kubectl_json("get", "pods", "-n", ns, "-l", "app=smoke")["items"]:
            if pod["status"].get("phase") == "Running" and pod["spec"].get("nodeName"):
                return dict(pod)
        return None

    pod = _poll("a Running smoke pod", running_pod, timeout=60)
    assert pod["spec"]["nodeName"] in DEMO_NODES
    assert pod["spec"]["schedulerName"] == "default-scheduler"

    cluster.kubectl("delete", "namespace", ns, "--wait=false")

    def gone() -> bool:
        return cluster.kubectl("get", "namespace", ns, check=False).returncode != 0

    _poll(f"namespace {ns} to be deleted", gone, timeout=60)


def test_stopping_an_extra_process_leaves_the_cluster_running(cluster: Cluster) -> None:
    rec = cluster.start_process("sleeper", [sys.executable, "-c", "import time; time.sleep(120)"])
    assert rec.alive()
    assert cluster.stop_process("sleeper") is True
    assert not rec.alive()
    assert cluster.is_running()  # a stopped extra process does not make `make demo` rebuild the cluster
    assert cluster.stop_process("sleeper") is False
    with pytest.raises(ValueError, match="part of the control plane"):
        cluster.stop_process("etcd")
