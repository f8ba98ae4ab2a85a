"""End-to-end: NodeVolumeLimits on the real control plane, kube-scheduler 1.35.4 as the oracle.

Both schedulers run as in ``e2e/test_parity.py`` (a stock kube-scheduler with profile
``parity-kube``, ome-scheduler with the chart's profile as ``parity-ome``) and see the same
objects: a node whose CSINode allows 2 attachments of :data:`FULL` (and 2 of :data:`OTHER`)
and holds 2 VolumeAttachments of :data:`FULL` volumes (their PVs exist, with a CSI source).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.harness.api import Api
from e2e.harness.scheduler import SchedulerProcess
from e2e.harness.waits import wait_for
from e2e.parity_gen import VolumeSpec
from e2e.parity_gen_volumes import FamilyCase, FamilyRunner, add_csi_claim, attachment, csi_node, csi_pv, hand_case
from e2e.parity_harness import KUBE_PROFILE, OME_PROFILE, KubeSchedulerProcess

FULL = "parity.csi.a"
OTHER = "parity.csi.b"
EXCEEDED = "1 node(s) exceed max volume count"


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
