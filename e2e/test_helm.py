"""End-to-end: the chart installs, rolls out and uninstalls on the real local control plane.

Follows the user guide's commands: ``helm install ome-scheduler <chart> --namespace ome
--create-namespace -f values.yaml``, ``kubectl rollout status deployment/ome-scheduler -n ome``
and ``helm uninstall ome-scheduler --namespace ome``. kwok plays the kubelets: the stock
kube-scheduler places the chart's two replicas on two of the four demo nodes (the default
required anti-affinity), kwok reports them Running and Ready without pulling the image or
running probes, so the rollout completes. Running the scheduler itself with the chart's
ServiceAccount is ``e2e/test_rbac.py``'s job.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness.cluster import Cluster
from e2e.harness.helm import RELEASE, helm
from e2e.harness.helm import RELEASE_NS as NS
from e2e.harness.paths import CHART, REPO
from e2e.harness.waits import wait_for

IMAGE = "registry.example.com/ome/ome-scheduler:v1.3.0"

# The guide's values: its image snippet; the default two replicas fit the four demo nodes.
VALUES = """\
global:
  hub: registry.example.com/ome
scheduler:
  image:
    tag: v1.3.0
"""

# What the chart creates with these values (chart.md §3.1): kind -> names, namespace or None.
EXPECTED = {
    ("ServiceAccount", "ome-scheduler", NS),
    ("ConfigMap", "ome-scheduler-config", NS),
    ("Deployment", "ome-scheduler", NS),
    ("Service", "ome-scheduler-metrics", NS),
    ("PodDisruptionBudget", "ome-scheduler", NS),
    ("ClusterRole", "ome-scheduler", None),
    ("ClusterRoleBinding", "ome-scheduler", None),
    ("Role", "ome-scheduler-leader-election", NS),
    ("RoleBinding", "ome-scheduler-leader-election", NS),
    ("ClusterRoleBinding", "ome-scheduler-auth-delegator", None),
    ("ClusterRole", "ome-scheduler-metrics-reader", None),
}


def exists(cluster: Cluster, kind: str, name: str, namespace: str | None) -> bool:
    args = ["get", kind, name, "--ignore-not-found", "-o", "name"]
    if namespace:
        args += ["-n", namespace]
    return bool(cluster.kubectl(*args).stdout.strip())


def release_pods(cluster: Cluster) -> list[dict[str, Any]]:
    out = cluster.kubectl_json("get", "pods", "-n", NS, "-l", "app.kubernetes.io/name=ome-scheduler")
    return list(out["items"])


@pytest.mark.e2e
def test_helm_install_rollout_and_uninstall(cluster: Cluster, clean_release: None, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(VALUES)

    # Step 1 of the guide, with the chart from this repository.
    inst = helm(cluster, "install", RELEASE, str(CHART), "--namespace", NS, "--create-namespace", "-f", str(values))
    assert inst.returncode == 0, inst.stderr
    assert "STATUS: deployed" in inst.stdout
    notes = inst.stdout.split("NOTES:", 1)[1]
    assert f"kubectl rollout status deployment/{RELEASE} -n {NS}" in notes

    roll = cluster.kubectl("rollout", "status", f"deployment/{RELEASE}", "-n", NS, "--timeout=120s", timeout=150)
    assert f'deployment "{RELEASE}" successfully rolled out' in roll.stdout

    pods = release_pods(cluster)
    assert len(pods) == 2
    assert all(p["status"]["phase"] == "Running" for p in pods)
    assert len({p["spec"]["nodeName"] for p in pods}) == 2, "the default anti-affinity puts replicas apart"
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {IMAGE}
    assert {p["spec"]["serviceAccountName"] for p in pods} == {RELEASE}

    # Everything the release manifests, and nothing else, exists in the cluster.
    manifest = helm(cluster, "get", "manifest", RELEASE, "--namespace", NS)
    assert manifest.returncode == 0, manifest.stderr
    docs = [d for d in yaml.safe_load_all(manifest.stdout) if d]
    objects = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in docs}
    assert objects == EXPECTED
    for kind, name, namespace in sorted(objects, key=str):
        assert exists(cluster, kind, name, namespace), f"{kind} {namespace or ''}/{name} missing after install"

    # The live ConfigMap is the chart's configuration, which ome-scheduler loads unchanged.
    from ome_scheduler.config.load import parse_config

    cm = cluster.kubectl_json("get", "configmap", "ome-scheduler-config", "-n", NS)
    cfg = parse_config(yaml.safe_load(cm["data"]["config.yaml"]), "ConfigMap")
    assert [p.scheduler_name for p in cfg.profiles] == [RELEASE]
    assert (cfg.leader_election.resource_name, cfg.leader_election.resource_namespace) == (RELEASE, NS)

    # The demo gang the NOTES print is the guide's (examples/demo, which test_walking_skeleton runs).
    blocks = re.findall(r"<<'YAML'\n(.*?)\nYAML\n", notes, flags=re.S)
    assert [yaml.safe_load(b) for b in blocks] == [
        yaml.safe_load((REPO / "examples/demo/podgroup.yaml").read_text()),
        yaml.safe_load((REPO / "examples/demo/gang.yaml").read_text()),
    ]

    # Clean up as the guide does.
    un = helm(cluster, "uninstall", RELEASE, "--namespace", NS)
    assert un.returncode == 0, un.stderr
    assert f'release "{RELEASE}" uninstalled' in un.stdout

    def all_gone() -> bool:
        return not any(exists(cluster, kind, name, namespace) for kind, name, namespace in objects)

    wait_for("every object of the release deleted", all_gone, timeout=60, interval=0.5)
    for kind, name, namespace in objects:
        assert not exists(cluster, kind, name, namespace), f"{kind} {namespace or ''}/{name} left behind"
    wait_for("the release's pods deleted", lambda: not release_pods(cluster), timeout=60, interval=0.5)
    assert helm(cluster, "status", RELEASE, "--namespace", NS).returncode != 0
