"""End-to-end: NodeVolumeLimits on the real control plane, kube-scheduler 1.35.4 as the oracle.

Both schedulers run as in ``e2e/test_parity.py`` (a stock kube-scheduler with profile
``parity-kube``, ome-scheduler with the chart's profile as ``parity-ome``) and see the same
objects: a node whose CSINode allows 2 attachments of :data:`FULL` (and 2 of :data:`OTHER`)
and holds 2 VolumeAttachments of :data:`FULL` volumes (their PVs exist, with a CSI source).

The gang tests (issue 27: the gang room counts attach limits, design §3.1) need no oracle:
ome-scheduler alone places PodGroups whose members each mount their own claim of :data:`GANG`
on nodes of two domains, and the gang must land whole in the domain that can attach every
member's volume, or wait with a clear reason until one can.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.harness.api import Api
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import temp_nodes, wait_bound, wait_for, wait_message
from e2e.parity_gen import CASE_LABEL, VolumeSpec
from e2e.parity_gen_volumes import FamilyCase, FamilyRunner, add_csi_claim, attachment, csi_node, csi_pv, hand_case
from e2e.parity_harness import KUBE_PROFILE, OME_PROFILE, KubeSchedulerProcess
from tests.support.manifests import domain_key, node, pod, pod_group

FULL = "parity.csi.a"
OTHER = "parity.csi.b"
EXCEEDED = "1 node(s) exceed max volume count"
GANG = "gang.csi.example.com"


@pytest.fixture(scope="module")
def runner(api: Api, kube: KubeSchedulerProcess, ome: SchedulerProcess) -> Iterator[FamilyRunner]:
    r = FamilyRunner(api)
    yield r
    r.close()


def full_node_case(prefix: str, driver: str) -> FamilyCase:
    """One node, CSINode ``FULL: 2, OTHER: 2``, two attachments of ``FULL`` volumes; the new
    pod mounts one claim bound to a fresh volume of ``driver``."""
    case = hand_case(prefix)
    cid, node = case.id, case.nodes[0]["metadata"]["name"]
    case.csinodes = [csi_node(node, {FULL: 2, OTHER: 2}, cid)]
    for k in range(2):
        case.attachment_pvs.append(csi_pv(f"{cid}-ap{k}", FULL, f"{cid}-h{k}", cid))
        case.attachments.append(attachment(f"{cid}-va{k}", FULL, node, f"{cid}-ap{k}", cid))
    case.volumes = VolumeSpec(cid)
    add_csi_claim(case.volumes, case.pod, "data", driver, f"{cid}-new")
    return case


def test_a_third_volume_of_a_full_driver_exceeds_the_limit_and_another_driver_fits(runner: FamilyRunner) -> None:
    full, other = full_node_case("vf", FULL), full_node_case("vo", OTHER)
    results = {r.case.id: r for r in runner.run_batch([full, other])}
    f, o = results[full.id], results[other.id]
    assert not f.problems and not o.problems, f.problems + o.problems
    assert not f.kube.bound and EXCEEDED in f.kube.message, f.kube.short()
    assert f.ome.message == f.kube.message
    node = other.nodes[0]["metadata"]["name"]
    assert o.kube.node == o.ome.node == node, (o.kube.short(), o.ome.short())


def scheduled(api: Api, ns: str, name: str) -> dict[str, Any]:
    p = api.pod(ns, name)
    cond: dict[str, Any] = next((c for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"), {})
    return {"node": p["spec"].get("nodeName") or "", "message": cond.get("message", "")}


def test_deleting_an_attachment_requeues_the_pod_in_both_schedulers(api: Api, runner: FamilyRunner) -> None:
    """Both pods mount the same claim (one volume: once one is bound, the other's volume is
    already on the node). Rejected for the limit, they bind within seconds of one
    VolumeAttachment's deletion: the queueing hint, not the 5-minute flush."""
    case = full_node_case("vr", FULL)
    runner.setup([case])
    try:
        ns = case.volumes.namespace("k") if case.volumes else ""
        pods = {"t-kube": case.pod_for("t-kube", KUBE_PROFILE, "k"), "t-ome": case.pod_for("t-ome", OME_PROFILE, "k")}
        for p in pods.values():
            api.create_pod(p)

        def both_rejected() -> bool:
            return all(EXCEEDED in scheduled(api, ns, n)["message"] for n in pods)

        wait_for("both pods rejected for the volume limit", both_rejected, timeout=30)
        messages = {n: scheduled(api, ns, n)["message"] for n in pods}
        assert messages["t-kube"] == messages["t-ome"], messages
        api.delete(f"/apis/storage.k8s.io/v1/volumeattachments/{case.id}-va0")
        node = case.nodes[0]["metadata"]["name"]

        def both_bound() -> bool:
            return all(scheduled(api, ns, n)["node"] == node for n in pods)

        wait_for("both pods bound after the attachment's deletion", both_bound, timeout=20)
    finally:
        runner.teardown([case])


# ---- the gang room counts attach limits (issue 27) ----------------------------------------


def gang_volumes(api: Api, ns: str, key: str, members: int) -> list[str]:
    """PVs ``<key>-pv<i>`` (CSI source of :data:`GANG`, pre-bound) and claims ``data-<i>`` in
    ``ns``; waits until the PV controller completed each binding. Returns the PV names."""
    pvs = []
    for i in range(members):
        name = f"{key}-pv{i}"
        pv = csi_pv(name, GANG, f"{key}-h{i}", key, "")
        pv["spec"]["storageClassName"] = ""
        pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": ns, "name": f"data-{i}"}
        api.post("/api/v1/persistentvolumes", pv)
        pvs.append(name)
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"data-{i}", "namespace": ns},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": "",
                "volumeName": name,
            },
        }
        api.post(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", claim)

    def bound() -> bool:
        items = api.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims")["items"]
        done = [c for c in items if "pv.kubernetes.io/bind-completed" in (c["metadata"].get("annotations") or {})]
        return len(done) == members

    wait_for("the gang's claims bound", bound, timeout=60)
    return pvs


def gang_cluster(api: Api, key: str, dk: str, limit: int) -> list[dict[str, Any]]:
    """Nodes ``<key>-a0`` (domain a) and ``<key>-b0``, ``<key>-b1`` (domain b), 8 GPUs each, and
    their CSINodes allowing ``limit`` attachments of :data:`GANG`. By GPUs alone, domain a (room 8)
    is the best fit for a gang of 3 members asking 1 GPU each."""
    nodes = [node(f"{key}-{n}", {dk: n[0]}, gpu=8) for n in ("a0", "b0", "b1")]
    for n in nodes:
        api.post("/apis/storage.k8s.io/v1/csinodes", csi_node(n["metadata"]["name"], {GANG: limit}, key))
    return nodes


def gang_members(api: Api, ns: str, dk: str, members: int) -> list[str]:
    api.create_pod_group(pod_group("g", ns, members, topology_key=dk))
    names = []
    for i in range(members):
        p = pod(f"g-{i}", ns, gang="g", scheduler=OME_PROFILE)
        p["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{i}"}}]
        api.create_pod(p)
        names.append(f"g-{i}")
    return names


def cleanup_csi(api: Api, key: str, pvs: list[str]) -> None:
    sel = f"{CASE_LABEL}={key}"
    api.delete(f"/apis/storage.k8s.io/v1/volumeattachments?labelSelector={sel}")
    api.delete(f"/apis/storage.k8s.io/v1/csinodes?labelSelector={sel}")
    for pv in pvs:
        api.delete(f"/api/v1/persistentvolumes/{pv}")


def domains_of(api: Api, ns: str, bound: dict[str, str], dk: str) -> set[str]:
    labels = {n["metadata"]["name"]: n["metadata"]["labels"].get(dk, "") for n in api.nodes()}
    return {labels[n] for n in bound.values()}


def test_a_gang_skips_the_best_fit_domain_that_cannot_attach_its_volumes(
    api: Api, ome: SchedulerProcess, ns: str
) -> None:
    """Each node attaches 2 volumes of GANG: domain a (one node) attaches 2 of the 3 members'
    volumes, domain b (two nodes) 4, so the gang is pinned to b at once and lands whole there,
    though a is the best fit by GPUs. (Without the attach limits in the room the gang would also
    end in b, after pinning a and unwinding when its third member failed there: the events tell.)"""
    key, dk = domain_key("gv")
    pvs: list[str] = []
    try:
        with temp_nodes(api, gang_cluster(api, key, dk, limit=2)):
            pvs = gang_volumes(api, ns, key, 3)
            names = gang_members(api, ns, dk, 3)
            bound = wait_bound(api, ns, names, timeout=60)
            assert domains_of(api, ns, bound, dk) == {"b"}, bound
            # Pinned to b at once: never to a, and no member was tried (and failed) on a0's limit.
            pinned = wait_for("the gang's Pinned event", lambda: api.event_notes(ns, "g", "Pinned"), timeout=20)
            assert all(n.startswith(f"pinned to {dk}=b ") for n in pinned), pinned
            failed = [n for m in names for n in api.event_notes(ns, m, "FailedScheduling")]
            assert not [n for n in failed if "exceed max volume count" in n], failed
    finally:
        cleanup_csi(api, key, pvs)


def test_a_gang_no_domain_can_attach_waits_then_lands_when_an_attachment_goes(
    api: Api, ome: SchedulerProcess, ns: str
) -> None:
    """Each node attaches 2 volumes of GANG and already holds one attachment of another volume:
    a attaches 1 more, b 2, and the gang of 3 waits with the scheduler's reason, nothing bound.
    Deleting b0's attachment gives b room for 3: the gang lands whole in b (the hint wakes it)."""
    key, dk = domain_key("gw")
    pvs: list[str] = []
    try:
        nodes = gang_cluster(api, key, dk, limit=2)
        for n in nodes:
            name = n["metadata"]["name"]
            api.post("/api/v1/persistentvolumes", csi_pv(f"{name}-old", GANG, f"{name}-old", key))
            api.post(
                "/apis/storage.k8s.io/v1/volumeattachments", attachment(f"{name}-va", GANG, name, f"{name}-old", key)
            )
            pvs.append(f"{name}-old")
        with temp_nodes(api, nodes):
            pvs += gang_volumes(api, ns, key, 3)
            names = gang_members(api, ns, dk, 3)
            for m in names:
                wait_message(api, ns, m, f"no domain has room for gang {ns}/g", timeout=60)
            assert all(not api.pod(ns, m)["spec"].get("nodeName") for m in names)
            api.delete(f"/apis/storage.k8s.io/v1/volumeattachments/{key}-b0-va")
            bound = wait_bound(api, ns, names, timeout=30)
            assert domains_of(api, ns, bound, dk) == {"b"}, bound
    finally:
        cleanup_csi(api, key, pvs)
