"""End-to-end: what users are told about gangs (issue 15) on the real control plane.

* PodGroup status kept by the leader: the demo gang's ``kubectl get podgroups`` shows PHASE
  ``Running`` and RUNNING ``2``; phases follow the members (Pending, Scheduling, Running,
  Finished) and ``scheduleStartTime`` is set once;
* where and why: ``ome.io/placement`` (Holding / Bound), ``ome.io/placement-domain``,
  ``ome.io/placement-topology-key`` and ``ome.io/waiting-reason`` (the last FailedScheduling
  message, byte for byte);
* ``ome-scheduler explain``, run as a separate read-only process with the admin kubeconfig and
  the scheduler's configuration: on pending and bound gangs of the gang scenarios it must
  choose the domain the scheduler then binds in, and print the message the scheduler logs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from e2e.harness.api import Api
from e2e.harness.cluster import Cluster
from e2e.harness.gangs import create_held_gang
from e2e.harness.paths import REPO
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import temp_nodes, wait_at_permit, wait_bound, wait_for, wait_message
from tests.support.manifests import HOLD_GATE, HOSTNAME, domain_key, domain_nodes, pod, pod_group

pytestmark = pytest.mark.invariants_after_test

GROUP = "/apis/scheduling.x-k8s.io/v1alpha1"


def pg_of(api: Api, ns: str, name: str) -> dict[str, Any]:
    return dict(api.get(f"{GROUP}/namespaces/{ns}/podgroups/{name}"))


def pg_annotations(api: Api, ns: str, name: str) -> dict[str, str]:
    return dict(pg_of(api, ns, name)["metadata"].get("annotations", {}))


def wait_annotated(api: Api, ns: str, name: str, key: str, value: str | None = None) -> dict[str, str]:
    """Wait until PodGroup ``ns/name`` has annotation ``key`` (with ``value``, when given); return its annotations."""

    def seen() -> dict[str, str] | None:
        a = pg_annotations(api, ns, name)
        return a if a.get(key) and (value is None or a[key] == value) else None

    return wait_for(f"{key}={value or '*'} on PodGroup {name}", seen)


def explain(cluster: Cluster, scheduler: SchedulerProcess, *args: str) -> dict[str, Any]:
    """``ome-scheduler explain ... -o json`` as a user runs it (its own process, admin kubeconfig)."""
    cmd = [
        sys.executable,
        "-m",
        "ome_scheduler",
        "explain",
        *args,
        "-o",
        "json",
        f"--kubeconfig={cluster.kubeconfig}",
        f"--config={scheduler.config_path}",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def domains_of(api: Api, ns: str, names: list[str], dk: str) -> set[str]:
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"].get(dk, "") for n in api.nodes()}
    return {nodes[n] for n in wait_bound(api, ns, names).values()}


def test_demo_gang_status_in_kubectl_get_podgroups(
    api: Api, cluster: Cluster, scheduler: SchedulerProcess, ns: str
) -> None:
    """The guide's demo PodGroup and Deployment, unchanged but for the namespace."""
    for f in ("podgroup.yaml", "gang.yaml"):
        cluster.apply((REPO / "examples/demo" / f).read_text().replace("namespace: gang-demo", f"namespace: {ns}"))
    pods = wait_for(
        "two demo pods", lambda: [p["metadata"]["name"] for p in api.pods(ns)] if len(api.pods(ns)) == 2 else None
    )
    wait_bound(api, ns, pods)

    def running() -> dict[str, Any] | None:
        st = pg_of(api, ns, "gang-demo").get("status", {})
        return st if st.get("phase") == "Running" and st.get("running") == 2 else None

    st = wait_for("the demo PodGroup Running with 2 running", running, timeout=30)
    assert st["scheduleStartTime"].endswith("Z")
    out = cluster.kubectl("get", "podgroups", "-n", ns).stdout
    print(out)
    header, row = out.strip().splitlines()
    assert header.split() == ["NAME", "PHASE", "MINMEMBER", "RUNNING", "SUCCEEDED", "FAILED", "AGE"]
    assert row.split()[:4] == ["gang-demo", "Running", "2", "2"]
    ann = wait_annotated(api, ns, "gang-demo", "ome.io/placement", "Bound")
    clique = {
        n["metadata"]["labels"].get("nvidia.com/gpu.clique")
        for n in api.nodes()
        if n["metadata"]["name"] in set(wait_bound(api, ns, pods).values())
    }
    assert ann["ome.io/placement-domain"] in clique and len(clique) == 1
    assert ann["ome.io/placement-topology-key"] == "nvidia.com/gpu.clique"
    assert "ome.io/waiting-reason" not in ann
    reasons = {e["reason"] for e in api.events(ns) if e["regarding"]["kind"] == "PodGroup"}
    assert {"Pinned", "Bound"} <= reasons
    # Members that finish: Finished, counted by a LIST (finished pods leave the pod informer).
    for p in pods:
        api.patch(f"/api/v1/namespaces/{ns}/pods/{p}/status", {"status": {"phase": "Succeeded"}})
    api.patch(f"/apis/apps/v1/namespaces/{ns}/deployments/gang-demo", {"spec": {"replicas": 0}})

    def finished() -> dict[str, Any] | None:
        st = pg_of(api, ns, "gang-demo").get("status", {})
        return st if st.get("phase") == "Finished" else None

    st = wait_for("the demo PodGroup Finished", finished, timeout=30)
    assert st["succeeded"] == 2


def test_a_gang_without_room_says_why_and_explain_agrees(
    api: Api, cluster: Cluster, scheduler: SchedulerProcess, ns: str
) -> None:
    key, dk = domain_key("noroom")
    with temp_nodes(api, domain_nodes(key, dk, {"three": 3, "four": 4})):
        members = api.create_gang(ns, 5, dk)
        msg = wait_message(api, ns, "m0", f"no domain has room for gang {ns}/g")
        logged = wait_for("the logged failure", lambda: scheduler.last_failure(ns, "m0") or None)
        assert logged == msg
        ann = wait_annotated(api, ns, "g", "ome.io/waiting-reason")
        assert ann["ome.io/waiting-reason"].endswith(f"no domain has room for gang {ns}/g. no new claims to deallocate")
        assert "ome.io/placement" not in ann
        assert pg_of(api, ns, "g")["status"]["phase"] == "Scheduling"  # all 5 exist, none bound
        ex = explain(cluster, scheduler, "podgroup", f"{ns}/g")
        assert ex["decision"]["result"] == "unschedulable"
        assert ex["decision"]["message"] == scheduler.last_failure(ns, ex["decision"]["pod"])
        assert {d["domain"]: (d["room"], d["fits"]) for d in ex["domains"]} == {"three": (3, False), "four": (4, False)}
        assert [m["state"] for m in ex["members"]] == ["pending"] * len(members)
        assert ex["status"]["waitingReason"] == ann["ome.io/waiting-reason"]
        # The gang leaves before its nodes do: each deleted node of its domain would wake all five
        # members once more (hint 6 of §6.2), attempts that the livelock check would count.
        for m in members:
            api.delete_pod(ns, m)


def test_explain_picks_the_domain_the_scheduler_then_binds(
    api: Api, cluster: Cluster, scheduler: SchedulerProcess, ns: str
) -> None:
    """The race scenario's domains (three and four nodes), a gang of three held by scheduling
    gates: explain says where it goes once ungated; the scheduler then binds it there."""
    key, dk = domain_key("choose")
    with temp_nodes(api, domain_nodes(key, dk, {"three": 3, "four": 4})):
        api.create_pod_group(pod_group("g", ns, 3, topology_key=dk))
        names = [f"m{i}" for i in range(3)]
        for n in names:
            api.create_pod(pod(n, ns, gang="g", anti_affinity_on=HOSTNAME, gates=[HOLD_GATE]))
        wait_for("phase Scheduling", lambda: pg_of(api, ns, "g").get("status", {}).get("phase") == "Scheduling")
        ex = explain(cluster, scheduler, "podgroup", f"{ns}/g")
        assert [m["state"] for m in ex["members"]] == ["gated"] * 3
        assert ex["decision"]["result"] == "pinned" and ex["decision"]["ifUngated"]
        chosen = ex["decision"]["domain"]
        assert chosen == "three"  # best fit
        for n in names:
            api.ungate(ns, n)
        assert domains_of(api, ns, names, dk) == {chosen}
        ann = wait_annotated(api, ns, "g", "ome.io/placement", "Bound")
        assert (ann["ome.io/placement-domain"], ann["ome.io/placement-topology-key"]) == (chosen, dk)
        bound = explain(cluster, scheduler, "pod", f"{ns}/m1")
        assert (bound["name"], bound["decision"]["result"], bound["decision"]["domain"]) == ("g", "bound", chosen)
        assert {m["state"] for m in bound["members"]} == {"bound"}


def test_a_held_domain_shows_in_the_placement_and_in_explain(
    api: Api, cluster: Cluster, scheduler: SchedulerProcess, ns: str
) -> None:
    """A forming gang holds the only domain (members waiting at Permit); a second gang is told
    every fitting domain is reserved. explain derives the hold from the API and says the same."""
    key, dk = domain_key("held")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 3})):
        create_held_gang(api, ns, 3, dk)
        node0 = wait_at_permit(api, ns, "m0")
        wait_at_permit(api, ns, "m1")
        ann = wait_annotated(api, ns, "g", "ome.io/placement", "Holding")
        assert (ann["ome.io/placement-domain"], ann["ome.io/placement-topology-key"]) == ("a", dk)
        api.create_pod_group(pod_group("s", ns, 1, topology_key=dk))
        api.create_pod(pod("s0", ns, gang="s"))
        msg = wait_message(api, ns, "s0", "every fitting domain is reserved for a forming gang")
        ex = explain(cluster, scheduler, "podgroup", f"{ns}/s")
        assert ex["decision"]["message"] == msg == scheduler.last_failure(ns, "s0")
        (a,) = ex["domains"]
        assert a["heldBy"] == [f"{ns}/g (1 more)"]
        assert a["reasons"].get("node is reserved for a forming gang") == 1
        g = explain(cluster, scheduler, "podgroup", f"{ns}/g")
        assert [(m["name"], m["state"]) for m in g["members"]] == [
            ("m0", "waiting"),
            ("m1", "waiting"),
            ("m2", "not-ours"),
        ]
        assert g["members"][0]["node"] == node0
        assert (g["decision"]["result"], g["decision"]["domain"]) == ("waiting", "a")
        reason = wait_for(
            "s's waiting reason", lambda: pg_annotations(api, ns, "s").get("ome.io/waiting-reason") or None
        )
        assert reason == msg


def test_incomplete_templates_stay_pending(api: Api, cluster: Cluster, scheduler: SchedulerProcess, ns: str) -> None:
    key, dk = domain_key("tmpl")
    with temp_nodes(api, domain_nodes(key, dk, {"a": 3})):
        api.create_pod_group(pod_group("g", ns, 3, topology_key=dk))
        for i in range(2):
            api.create_pod(pod(f"m{i}", ns, gang="g", anti_affinity_on=HOSTNAME))
        msg = wait_message(api, ns, "m0", f"waiting for all PodGroup member templates for {ns}/g")
        st = wait_for("Pending", lambda: (s := pg_of(api, ns, "g").get("status", {})).get("phase") == "Pending" and s)
        assert "scheduleStartTime" not in st
        reason = wait_for(
            "the waiting reason", lambda: pg_annotations(api, ns, "g").get("ome.io/waiting-reason") or None
        )
        assert f"waiting for all PodGroup member templates for {ns}/g" in reason
        ex = explain(cluster, scheduler, "pod", f"{ns}/m1")
        assert ex["decision"]["pod"] == "m1"
        assert ex["decision"]["message"] == msg
        api.create_pod(pod("m2", ns, gang="g", anti_affinity_on=HOSTNAME))
        wait_bound(api, ns, ["m0", "m1", "m2"])
        st = wait_for("Running", lambda: (s := pg_of(api, ns, "g").get("status", {})).get("phase") == "Running" and s)
        assert st["running"] == 3 and st["scheduleStartTime"]
        assert "ome.io/waiting-reason" not in pg_annotations(api, ns, "g")
