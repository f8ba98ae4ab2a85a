"""End-to-end: the chart's RBAC is exactly what ome-scheduler uses, and no log holds a token (issue 13, item 5).

``test_chart_rbac_is_exactly_what_the_scheduler_uses``: the chart is installed (one replica,
which kwok only pretends to run) and ome-scheduler runs locally with the rendered ConfigMap and
a token of the chart's ServiceAccount as its only credentials, through a workload that needs
every permission the chart grants it:

* the guide's demo gang: the Lease (created, read, taken, renewed), every informer, Bindings,
  nominatedNodeName and PodScheduled patches, Scheduled and FailedScheduling events;
* a gang that cannot form, whose PodGroup changes twice, so that its member fails three times
  with the same message and its FailedScheduling event becomes a series (an event patch);
* a pod whose WaitForFirstConsumer claim binds to a local PV (PreBind patches the PV's
  claimRef), and one whose claim is provisioned (PreBind patches the claim's selected-node
  annotation; the test plays the external provisioner);
* a pod whose claim, made by the resourceclaim controller from a template, gets a device of a
  hand-written ResourceSlice (PreBind patches the claim's finalizer, then its status);
* ``/metrics`` read with a token of a ServiceAccount the chart's metrics-reader binding lists
  (200) and of one it does not (403): TokenReviews and SubjectAccessReviews;
* a graceful stop, which releases the Lease.

Then, from the API server's audit log of the session (``e2e/audit-policy.yaml``): the
ServiceAccount was never refused (no 401, no 403, no ``forbid`` decision), every permission it
used is one the chart grants it, and every permission the chart grants it was used, except those
the chart lists in ``rarely used:`` comments with why they are still needed.

``test_no_token_in_any_log`` runs after every other test of the session: every log the suite
produced (the control plane's, the audit log, every ome-scheduler's, the job operators' and
Prometheus's) is searched for every bearer token the suite was issued (``e2e/harness/tokens.py``); none
may appear, not even its payload or signature alone. First it adds the cases most likely to leak
one: ome-scheduler at ``--v=10`` with a token the API server rejects (its ServiceAccount was
deleted), and ``/metrics`` requests with an allowed, a refused, a rejected and a malformed token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import dra_objects as d
from e2e.harness.api import Api
from e2e.harness.audit import AuditLog, permissions, refused
from e2e.harness.cluster import Cluster
from e2e.harness.helm import RELEASE, RELEASE_NS, helm
from e2e.harness.paths import CHART, REPO
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.tokens import issued, needles
from e2e.harness.waits import wait_bound, wait_for
from tests.support.manifests import (
    CLIQUE,
    chart_config,
    persistent_volume,
    persistent_volume_claim,
    pod,
    pod_group,
    storage_class,
    unique,
    with_claim,
)
from tests.support.rbac import Permission, rarely_used, rule_permissions

SA_USER = f"system:serviceaccount:{RELEASE_NS}:{RELEASE}"
SUBJECT = {"kind": "ServiceAccount", "name": RELEASE, "namespace": RELEASE_NS}
SELECTED_NODE = "volume.kubernetes.io/selected-node"
FAKE_PROVISIONER = "e2e.ome.io/provisioner"


def granted_to(cluster: Cluster, docs: Sequence[Mapping[str, Any]], subject: Mapping[str, str]) -> set[Permission]:
    """Every permission the release's bindings give ``subject``: the rules of the roles they
    reference, taken from the release itself or, for built-in roles, from the cluster."""
    roles = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] in ("ClusterRole", "Role")
    }
    out: set[Permission] = set()
    for b in docs:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding") or dict(subject) not in b.get("subjects", []):
            continue
        ref = b["roleRef"]
        ns = b["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], ns, ref["name"]))
        if role is None:
            role = cluster.kubectl_json("get", ref["kind"].lower(), ref["name"], *(["-n", ns] if ns else []))
        for rule in role.get("rules") or []:
            assert "*" not in str(rule.get("verbs")) + str(rule.get("resources")), f"wildcard in {ref}: {rule}"
            out |= rule_permissions(rule)
    return out


def values_yaml(readers_ns: str) -> str:
    return f"""\
scheduler:
  replicaCount: 1
  podDisruptionBudget:
    enabled: false
  metrics:
    reader:
      serviceAccounts:
        - name: prometheus
          namespace: {readers_ns}
"""


def demo_gang(cluster: Cluster, api: Api, sched: SchedulerProcess, ns: str) -> None:
    """The guide's PodGroup and Deployment: both pods bound to two nodes, each with a Scheduled
    event from the release's scheduler name."""
    for doc in ("podgroup.yaml", "gang.yaml"):
        obj = yaml.safe_load((REPO / "examples/demo" / doc).read_text())
        obj["metadata"]["namespace"] = ns
        cluster.apply(yaml.safe_dump(obj))

    def two_pods() -> list[str] | None:
        names = [p["metadata"]["name"] for p in api.pods(ns, "app=gang-demo")]
        return names if len(names) == 2 else None

    pods = wait_for("two demo pods", two_pods, timeout=30)
    placed = wait_bound(api, ns, pods, timeout=60)
    assert len(set(placed.values())) == 2
    for p in pods:  # events are written after the Binding
        ev = wait_for(f"{p}'s Scheduled event", _events(api, ns, p, "Scheduled"), timeout=15)
        assert ev[0]["reportingController"] == RELEASE


def _events(api: Api, ns: str, name: str, reason: str) -> Callable[[], list[dict[str, Any]]]:
    return lambda: [e for e in api.events(ns, name) if e["reason"] == reason]


def failures_of(sched: SchedulerProcess, ns: str, name: str) -> int:
    """How many failed scheduling attempts of ``ns/name`` the scheduler logged."""
    return sum(
        1 for line in sched.log().splitlines() if "Unable to schedule pod" in line and f'pod="{ns}/{name}"' in line
    )


def _more_failures_than(sched: SchedulerProcess, ns: str, name: str, n: int) -> Callable[[], bool]:
    return lambda: failures_of(sched, ns, name) > n


def event_series(api: Api, sched: SchedulerProcess, ns: str) -> None:
    """A gang of four with one member: every change of its PodGroup retries the member, which
    fails again with the same message; its third failure finds the pod unchanged since the second
    (no new status to write), so its FailedScheduling event becomes a series."""
    api.create_pod_group(pod_group("forming", ns, 4, topology_key=CLIQUE, timeout=None))
    api.create_pod(pod("forming-0", ns, gang="forming", gpu=0))
    for i in range(3):
        if i:
            api.patch_pod_group(ns, "forming", {"metadata": {"labels": {"e2e.ome.io/poke": str(i)}}})
        wait_for(f"forming-0 failed {i + 1} time(s)", _more_failures_than(sched, ns, "forming-0", i), timeout=30)
    series = wait_for(
        "forming-0's FailedScheduling event as a series",
        lambda: [e for e in api.events(ns, "forming-0") if e["reason"] == "FailedScheduling" and e.get("series")],
        timeout=30,
    )
    assert series[0]["series"]["count"] == 2
    assert "waiting for all PodGroup member templates" in series[0]["note"]


def volumes(api: Api, ns: str, node_name: str) -> list[str]:
    """A claim bound to a local PV, then one provisioned (the test provisions it): both pods
    bound where their volume is. Returns the cluster-scoped objects made (for clean-up)."""
    local, provisioned = f"{ns}-local", f"{ns}-provisioned"
    api.post("/apis/storage.k8s.io/v1/storageclasses", storage_class(local))
    api.post("/apis/storage.k8s.io/v1/storageclasses", storage_class(provisioned, FAKE_PROVISIONER))
    api.post("/api/v1/persistentvolumes", persistent_volume(local, local, node_name))
    wait_for(
        "the local PV Available",
        lambda: api.get(f"/api/v1/persistentvolumes/{local}").get("status", {}).get("phase") == "Available",
    )
    claims = f"/api/v1/namespaces/{ns}/persistentvolumeclaims"
    api.post(claims, persistent_volume_claim("local", ns, local))
    api.create_pod(with_claim(pod("local-volume", ns, gpu=0), "local"))
    assert wait_bound(api, ns, ["local-volume"], timeout=60) == {"local-volume": node_name}
    assert api.get(f"{claims}/local")["spec"]["volumeName"] == local

    api.post(claims, persistent_volume_claim("provisioned", ns, provisioned))
    api.create_pod(with_claim(pod("provisioned-volume", ns, gpu=0), "provisioned"))

    def selected() -> dict[str, Any] | None:
        c: dict[str, Any] = api.get(f"{claims}/provisioned")
        return c if SELECTED_NODE in (c["metadata"].get("annotations") or {}) else None

    claim = wait_for("the scheduler's selected-node annotation on the claim", selected, timeout=30)
    chosen = claim["metadata"]["annotations"][SELECTED_NODE]
    api.post("/api/v1/persistentvolumes", persistent_volume(provisioned, provisioned, chosen, claim=claim))
    assert wait_bound(api, ns, ["provisioned-volume"], timeout=60) == {"provisioned-volume": chosen}
    assert api.get(f"{claims}/provisioned")["spec"]["volumeName"] == provisioned
    return [f"storageclass/{local}", f"storageclass/{provisioned}", f"pv/{local}", f"pv/{provisioned}"]


def dra(api: Api, ns: str, node_name: str) -> list[dict[str, Any]]:
    """A pod with a template claim for one device of a slice on ``node_name``: bound there, the
    claim allocated. Returns the cluster-scoped objects made (for clean-up)."""
    drv = d.driver(ns)
    cluster_scoped = [d.device_class(f"{ns}-gpu", drv), d.node_slice(drv, node_name, [d.gpu(0, node_name)])]
    d.create(api, *cluster_scoped)
    d.create(api, d.claim_template("one", ns, d.claim_spec([d.exactly("gpu", f"{ns}-gpu")])))
    api.create_pod(d.dra_pod("dra", ns, templates={"gpu": "one"}))
    assert wait_bound(api, ns, ["dra"], timeout=30) == {"dra": node_name}
    return cluster_scoped


@pytest.mark.e2e
def test_chart_rbac_is_exactly_what_the_scheduler_uses(
    cluster: Cluster, api: Api, audit: AuditLog, clean_release: None, tmp_path: Path
) -> None:
    ns, readers = unique("rbac"), unique("readers")
    values = tmp_path / "values.yaml"
    values.write_text(values_yaml(readers))
    inst = helm(
        cluster, "install", RELEASE, str(CHART), "--namespace", RELEASE_NS, "--create-namespace", "-f", str(values)
    )
    assert inst.returncode == 0, inst.stderr
    cm = cluster.kubectl_json("get", "configmap", f"{RELEASE}-config", "-n", RELEASE_NS)
    config = yaml.safe_load(cm["data"]["config.yaml"])
    kubeconfig = cluster.token_kubeconfig(tmp_path / "sa.kubeconfig", cluster.create_token(RELEASE, RELEASE_NS))
    for name in (ns, readers):
        api.create_namespace(name)
    for sa in ("prometheus", "intruder"):
        api.post(f"/api/v1/namespaces/{readers}/serviceaccounts", {"metadata": {"name": sa}})
    cluster_scoped: list[str] = []
    dra_objects: list[dict[str, Any]] = []
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{RELEASE_NS}/leases/{RELEASE}"
    try:
        with SchedulerProcess(cluster, config, kubeconfig=kubeconfig) as sched:
            holder = wait_for(
                f"the chart's scheduler holds the Lease {RELEASE_NS}/{RELEASE}",
                lambda: (api.try_get(lease) or {}).get("spec", {}).get("holderIdentity"),
                timeout=40,
            )
            wait_for(
                "the scheduler logs the identity it holds the Lease with", lambda: f'identity="{holder}"' in sched.log()
            )
            demo_gang(cluster, api, sched, ns)
            event_series(api, sched, ns)
            node_name = sorted(n["metadata"]["name"] for n in api.nodes("type=kwok"))[0]
            cluster_scoped = volumes(api, ns, node_name)
            dra_objects = dra(api, ns, node_name)
            allowed = api.request_token("prometheus", readers)
            r = sched.get("/metrics", token=allowed)
            assert r.status_code == 200 and "ome_scheduler_gang_pin_total" in r.text
            assert sched.get("/metrics", token=api.request_token("intruder", readers)).status_code == 403
            assert "forbidden" not in sched.log().lower(), sched.log()[-2000:]
        assert sched.proc is not None and sched.proc.returncode == 0, sched.log()[-2000:]
        assert not api.get(lease)["spec"].get("holderIdentity"), "the Lease is released at a graceful stop"
    finally:
        api.delete_namespace(ns, wait=60.0)
        api.delete_namespace(readers)
        for obj in cluster_scoped:
            cluster.kubectl("delete", obj, "--ignore-not-found", "--wait=false", check=False)
        d.delete(api, *dra_objects)

    manifest = helm(cluster, "get", "manifest", RELEASE, "--namespace", RELEASE_NS)
    assert manifest.returncode == 0, manifest.stderr
    docs = [d for d in yaml.safe_load_all(manifest.stdout) if d]
    granted = granted_to(cluster, docs, SUBJECT)
    rare = rarely_used(manifest.stdout)
    events = audit.requests(SA_USER)
    used = permissions(events)
    print(f"\n{len(events)} requests by {SA_USER}:")
    for p, n in sorted(used.items(), key=lambda kv: (kv[0].resource, kv[0].verb)):
        print(f"  {n:6d}  {p}")
    print("granted but rarely used:", ", ".join(map(str, sorted(rare))) or "none")

    denied = [
        f"{e['verb']} {e['requestURI']} -> {e.get('responseStatus', {}).get('code')}" for e in events if refused(e)
    ]
    assert not denied, f"the chart's ServiceAccount was refused: {denied[:20]}"
    assert not set(used) - granted, f"allowed by something other than the chart: {sorted(set(used) - granted)}"
    assert set(rare) <= granted, f"rarely used but not granted: {sorted(set(rare) - granted)}"
    assert not granted - set(used) - set(rare), (
        f"granted but never used, and not documented as rarely used: {sorted(granted - set(used) - set(rare))}"
    )
    # What issue 13 names of system:kube-scheduler is gone: deleting pods is not granted, and every
    # Lease request went to the chart's own Lease (the Role allows no other, but create).
    assert Permission("delete", "pods") not in granted
    lease_requests = [e for e in events if (e.get("objectRef") or {}).get("resource") == "leases"]
    assert lease_requests
    assert {(e["objectRef"]["namespace"], e["objectRef"].get("name", RELEASE)) for e in lease_requests} == {
        (RELEASE_NS, RELEASE)
    }


# ---- no bearer token in any log ------------------------------------------------------------------


def suite_logs(cluster: Cluster, basetemp: Path) -> list[Path]:
    """Every log the suite produced: the control plane's directory (components, audit log, job
    operators), every ``*.log`` under the state directory (each ome-scheduler's) and under the
    session's temporary directories (Prometheus's)."""
    found = {p for p in cluster.log_dir.iterdir() if p.is_file()}
    found |= {p for p in cluster.state_dir.rglob("*.log") if p.is_file()}
    found |= {p for p in basetemp.rglob("*.log") if p.is_file()}
    return sorted(found)


def token_hits(paths: Sequence[Path], tokens: Sequence[str]) -> list[str]:
    """``"<file>: token #<i> (<part>)"`` for every file holding a token or a give-away part of one."""
    hits: list[str] = []
    for path in paths:
        data = path.read_bytes()
        for i, tok in enumerate(tokens):
            for part, needle in zip(("whole", "payload", "signature"), needles(tok), strict=False):
                if needle.encode() in data:
                    hits.append(f"{path}: token #{i} ({part})")
    return hits


@pytest.mark.e2e
@pytest.mark.suite_end
def test_no_token_in_any_log(
    cluster: Cluster, api: Api, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    ns = unique("tokens")
    api.create_namespace(ns)
    try:
        # A token the API server rejects: its ServiceAccount is deleted once the token is issued.
        api.post(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "gone"}})
        rejected = api.request_token("gone", ns)
        api.delete(f"/api/v1/namespaces/{ns}/serviceaccounts/gone")
        kubeconfig = cluster.token_kubeconfig(tmp_path / "rejected.kubeconfig", rejected)
        cfg = chart_config(scheduler_name=unique("token-probe"))
        refused_sched = SchedulerProcess(cluster, cfg, name="rejected-token", v=10, kubeconfig=kubeconfig).launch()
        try:
            wait_for("the rejected token's 401 logged", lambda: "401" in refused_sched.log(), timeout=30)
        finally:
            refused_sched.stop()
        # Every kind of bearer token at the HTTPS endpoint, at the highest verbosity.
        with SchedulerProcess(cluster, cfg, name="token-probe", v=10) as sched:
            assert sched.get("/metrics", token=api.metrics_token("log-reader", ns)).status_code == 200
            assert sched.get("/metrics", token=api.metrics_token("log-intruder", ns, allowed=False)).status_code == 403
            assert sched.get("/metrics", token=rejected).status_code == 401
            assert sched.get("/metrics", token=f"{rejected}x").status_code == 401
    finally:
        api.delete_namespace(ns)
        cluster.kubectl("delete", "clusterrolebinding", f"e2e-metrics-reader-{ns}-log-reader", "--ignore-not-found")

    tokens = issued()
    assert rejected in tokens
    logs = suite_logs(cluster, tmp_path_factory.getbasetemp())
    names = {p.name for p in logs}
    assert {"kube-apiserver.log", "audit.log", "scheduler.log"} <= names, names
    # The search finds a token where there is one (the kubeconfig that holds it).
    assert token_hits([kubeconfig], [rejected]) == [
        f"{kubeconfig}: token #0 ({p})" for p in ("whole", "payload", "signature")
    ]
    print(f"\nsearched {len(logs)} logs ({sum(p.stat().st_size for p in logs) / 1e6:.1f} MB) for {len(tokens)} tokens")
    hits = token_hits(logs, tokens)
    assert not hits, hits
