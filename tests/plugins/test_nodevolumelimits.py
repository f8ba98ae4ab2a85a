"""NodeVolumeLimits: CSI attach limits, VolumeAttachments, in-tree migration, ephemeral volumes, hints.

The ``test_csi_limits`` table ports ``TestCSILimits`` of upstream's
``pkg/scheduler/framework/plugins/nodevolumelimits/csi_test.go`` (v1.35.4) case by case (same
names, same objects as its fake listers build), through the plugin as the scheduler builds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest

from ome_scheduler.api.core import PersistentVolumeClaim, Pod
from ome_scheduler.api.storage import MIGRATED_PLUGINS_ANNOTATION, CSINode, VolumeAttachment
from ome_scheduler.framework.events import QueueingHint
from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import PodInfo, QueuedPodInfo
from ome_scheduler.plugins.nodevolumelimits import (
    ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,
    NodeVolumeLimits,
    is_schedulable_after_attachment_deleted,
    is_schedulable_after_csinode_updated,
    is_schedulable_after_pod_deleted,
    is_schedulable_after_pvc_added,
)
from tests.support.plugins_env import Env, node, pod

NODE = "node-for-max-pd-test-1"
EBS = "ebs.csi.aws.com"
GCE = "pd.csi.storage.gke.io"
EBS_IN_TREE = "kubernetes.io/aws-ebs"
HOSTPATH = "kubernetes.io/hostpath"
SC = "csi-sc"
DRA = " no new claims to deallocate"
MAX = "node(s) exceed max volume count"
assert MAX == ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED  # upstream's text, byte for byte


def claims_pod(*claims: str, name: str = "p", ns: str = "default", node_name: str = "", uid: str = "") -> Pod:
    vols = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    p = pod(name, ns, node_name=node_name, spec={"volumes": vols})
    return with_uid(p, uid) if uid else p


def volumes_pod(*vols: dict[str, Any], name: str = "p", ns: str = "default", node_name: str = "", uid: str = "") -> Pod:
    p = pod(name, ns, node_name=node_name, spec={"volumes": list(vols)})
    return with_uid(p, uid) if uid else p


def with_uid(p: Pod, uid: str) -> Pod:
    return msgspec.structs.replace(p, metadata=msgspec.structs.replace(p.metadata, uid=uid))


def ebs_inline(volume_id: str, name: str = "inline") -> dict[str, Any]:
    return {"name": name, "awsElasticBlockStore": {"volumeID": volume_id}}


def ephemeral(name: str) -> dict[str, Any]:
    return {"name": name, "ephemeral": {"volumeClaimTemplate": {}}}


def csi_node(name: str, drivers: Sequence[str], limit: int | None, migrated: str = EBS_IN_TREE) -> CSINode:
    raw = {
        "metadata": {"name": name, "annotations": {MIGRATED_PLUGINS_ANNOTATION: migrated} if migrated else {}},
        "spec": {
            "drivers": [
                {"name": d, "nodeID": name, **({"allocatable": {"count": limit}} if limit is not None else {})}
                for d in drivers
            ]
        },
    }
    return msgspec.convert(raw, CSINode)


def attachment(name: str, pv: str | None, attacher: str, node_name: str = NODE) -> VolumeAttachment:
    src = {"persistentVolumeName": pv} if pv is not None else {}
    return msgspec.convert(
        {"metadata": {"name": name}, "spec": {"attacher": attacher, "nodeName": node_name, "source": src}},
        VolumeAttachment,
    )


def owned_claim(p: Pod, volume: str, uid: str | None = None) -> dict[str, Any]:
    refs = [{"kind": "Pod", "name": p.metadata.name, "uid": uid or p.metadata.uid, "controller": True}]
    md = {"name": f"{p.metadata.name}-{volume}", "namespace": p.metadata.namespace, "ownerReferences": refs}
    return {"metadata": md, "spec": {"storageClassName": SC}}


def fake_volumes(env: Env, drivers: Sequence[str], ns: str = "default") -> None:
    """The objects upstream's ``getFakeCSIPVLister``/``getFakeCSIPVCLister``/``getFakeCSIStorageClassLister`` hold."""
    for d in drivers:
        for j in range(4):
            name = f"csi-{d}-{j}"
            if d == EBS_IN_TREE:
                spec: dict[str, Any] = {"awsElasticBlockStore": {"volumeID": name}}
            elif d == HOSTPATH:
                spec = {"hostPath": {"path": "/tmp"}}
            else:
                spec = {"csi": {"driver": d, "volumeHandle": name}}
            env.add_pv({"metadata": {"name": name}, "spec": spec})
            env.add_pvc({"metadata": {"name": name, "namespace": ns}, "spec": {"volumeName": name}})
    env.add_pvc({"metadata": {"name": "csi-4", "namespace": ns}, "spec": {"storageClassName": SC}})
    env.add_pvc({"metadata": {"name": "csi-5", "namespace": ns}, "spec": {}})
    env.add_pvc(
        {"metadata": {"name": "csi-6", "namespace": ns}, "spec": {"storageClassName": SC, "volumeName": "missing"}}
    )
    env.add_storage_class({"metadata": {"name": SC}, "provisioner": drivers[0]})


@dataclass
class Case:
    new: Pod
    drivers: list[str]
    existing: list[Pod] = field(default_factory=list)
    limit_source: str = ""
    max_vols: int = 0
    va_count: int = 0
    extra_claims: list[dict[str, Any]] = field(default_factory=list)
    want: tuple[Code, str] | None = None
    want_skip: bool = False


def run_case(case: Case) -> tuple[Status | None, Status | None]:
    env = Env()
    env.add_node(node(NODE))
    vs = env.s.volume_store()
    fake_volumes(env, case.drivers, case.new.metadata.namespace)
    for raw in case.extra_claims:
        env.add_pvc(raw)
    if case.limit_source == "csinode":
        vs.on_csinode_add(csi_node(NODE, case.drivers, case.max_vols))
    elif case.limit_source == "csinode-with-no-limit":
        vs.on_csinode_add(csi_node(NODE, case.drivers, None))
    for d in case.drivers:
        for j in range(case.va_count):
            vs.on_attachment_add(attachment(f"va-{d}-{j}", f"csi-{d}-{j}", d))
    ns = case.new.metadata.namespace
    for p in case.existing:
        # Upstream's fake claim lister ignores namespaces; here every object shares the new pod's.
        md = msgspec.structs.replace(p.metadata, namespace=ns)
        env.add_pod(msgspec.structs.replace(p, metadata=md, spec=msgspec.structs.replace(p.spec, node_name=NODE)))
    pl = env.s.frameworks["ome-scheduler"].plugins["NodeVolumeLimits"]
    assert isinstance(pl, NodeVolumeLimits)
    ni = env.s.cache.get_node_info(NODE)
    assert ni is not None
    state = CycleState()
    pi = PodInfo(case.new)
    _, pre = pl.pre_filter(state, pi, [ni])
    if pre is not None and pre.is_skip():
        return pre, None
    return pre, pl.filter(state, pi, ni)


def _cases() -> dict[str, Case]:
    running = claims_pod(f"csi-{EBS}-3", name="running")
    pending = claims_pod("csi-4", name="pending")
    unbound2 = claims_pod("csi-4", name="pending2")
    missing_pv = claims_pod("csi-6", name="missing-pv")
    no_sc = claims_pod("csi-5", name="no-sc")
    gce_two = claims_pod(f"csi-{GCE}-1", f"csi-{GCE}-2", name="gce-two")
    in_tree_one = claims_pod(f"csi-{EBS_IN_TREE}-0", name="in-tree-one")
    in_tree_two = claims_pod(f"csi-{EBS_IN_TREE}-1", f"csi-{EBS_IN_TREE}-2", name="in-tree-two")
    ebs_one = claims_pod(f"csi-{EBS}-0", name="ebs-one")
    ebs_two = claims_pod(f"csi-{EBS}-1", f"csi-{EBS}-2", name="ebs-two")
    non_migratable = claims_pod(f"csi-{HOSTPATH}-0", name="hostpath")
    eph = volumes_pod(ephemeral("xyz"), name="abc", ns="test", uid="12345")
    eph_claim = owned_claim(eph, "xyz")
    conflicting = {**eph_claim, "metadata": {**eph_claim["metadata"], "ownerReferences": []}}
    eph_two = volumes_pod(ephemeral("x"), ephemeral("y"), name="abc", ns="test", uid="12345II")
    inline = volumes_pod(ebs_inline("aws-inline1"), name="inline")
    inline_same_id = volumes_pod(ebs_inline(f"csi-{EBS}-1"), name="inline-same")
    cm = {"name": "cm", "configMap": {"name": "c"}}
    secret = {"name": "s", "secret": {"secretName": "s"}}
    only_cm = volumes_pod(cm, secret, name="cm")
    pvc_cm = volumes_pod(cm, secret, {"name": "v", "persistentVolumeClaim": {"claimName": f"csi-{EBS}-0"}}, name="pc")
    eph_cm = volumes_pod(cm, secret, ephemeral("xyz"), name="abc", ns="test")
    inline_cm = volumes_pod(cm, secret, ebs_inline("aws-inline1"), name="ic")
    unsched = (Code.UNSCHEDULABLE, MAX)
    not_found = (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        'looking up PVC test/abc-xyz: persistentvolumeclaim "abc-xyz" not found',
    )
    return {
        "should count VolumeAttachments towards volume limit when no pods exist": Case(
            ebs_one, [EBS], limit_source="csinode", max_vols=2, va_count=2, want=unsched
        ),
        "should schedule pod when VolumeAttachments count does not exceed limit": Case(
            ebs_one, [EBS], limit_source="csinode", max_vols=2, va_count=1
        ),
        "fits when node volume limit >= new pods CSI volume": Case(ebs_one, [EBS], [running, ebs_two], "csinode", 4),
        "doesn't when node volume limit <= pods CSI volume": Case(
            ebs_one, [EBS], [running, ebs_two], "csinode", 2, want=unsched
        ),
        "should when driver does not support volume limits": Case(
            ebs_one, [EBS], [running, ebs_two], "csinode-with-no-limit", 2
        ),
        "count pending PVCs towards volume limit <= pods CSI volume": Case(
            ebs_one, [EBS], [pending, ebs_two], "csinode", 2, want=unsched
        ),
        "count multiple pending pvcs towards volume limit >= pods CSI volume": Case(
            ebs_one, [EBS], [pending, unbound2, ebs_two], "csinode", 4
        ),
        "should count PVCs with invalid PV name but valid SC": Case(
            ebs_one, [EBS], [missing_pv, ebs_two], "csinode", 2, want=unsched
        ),
        "don't count pvcs with missing SC towards volume limit": Case(ebs_one, [EBS], [running, no_sc], "csinode", 2),
        "count pvcs with the same type towards volume limit": Case(
            ebs_one, [EBS, GCE], [gce_two, ebs_two], "csinode", 2, want=unsched
        ),
        "don't count pvcs with different type towards volume limit": Case(
            gce_two, [EBS, GCE], [ebs_two, running], "csinode", 2
        ),
        "should count in-tree volumes if migration is enabled": Case(
            in_tree_one, [EBS_IN_TREE, EBS], [in_tree_two], "csinode", 2, want=unsched
        ),
        "nil csi node": Case(inline, [EBS_IN_TREE, EBS], [in_tree_two]),
        "should count unbound in-tree volumes if migration is enabled": Case(
            pending, [EBS_IN_TREE, EBS], [in_tree_two], "csinode", 2, want=unsched
        ),
        "should not limit pod if volume used does not report limits": Case(
            in_tree_one, [EBS_IN_TREE, EBS], [in_tree_two], "csinode-with-no-limit", 2
        ),
        "should not count non-migratable in-tree volumes": Case(
            non_migratable, [HOSTPATH, EBS], [ebs_two], "csinode", 2
        ),
        "should count in-tree inline volumes if migration is enabled": Case(
            inline, [EBS_IN_TREE, EBS], [in_tree_two], "csinode", 2, want=unsched
        ),
        "should count in-tree and csi volumes if migration is enabled (when scheduling in-tree volumes)": Case(
            in_tree_one, [EBS_IN_TREE, EBS], [ebs_two], "csinode", 2, want=unsched
        ),
        "should count in-tree, inline and csi volumes if migration is enabled (when scheduling in-tree volumes)": Case(
            inline, [EBS_IN_TREE, EBS], [ebs_two, in_tree_one], "csinode", 3, want=unsched
        ),
        "should not count in-tree, inline and csi volumes if migration is enabled (when scheduling in-tree volumes)": (
            Case(inline_same_id, [EBS_IN_TREE, EBS], [ebs_two, in_tree_one], "csinode", 3)
        ),
        "should count in-tree and csi volumes if migration is enabled (when scheduling csi volumes)": Case(
            ebs_one, [EBS_IN_TREE, EBS], [in_tree_two], "csinode", 2, want=unsched
        ),
        "ephemeral volume missing": Case(eph, [EBS], limit_source="csinode-with-no-limit", want=not_found),
        "ephemeral volume not owned": Case(
            eph,
            [EBS],
            limit_source="csinode-with-no-limit",
            extra_claims=[conflicting],
            want=(Code.ERROR, "PVC test/abc-xyz was not created for pod test/abc (pod is not owner)"),
        ),
        "ephemeral volume unbound": Case(eph, [EBS], limit_source="csinode-with-no-limit", extra_claims=[eph_claim]),
        "ephemeral doesn't when node volume limit <= pods CSI volume": Case(
            eph, [EBS], [running, ebs_two], "csinode", 2, extra_claims=[eph_claim], want=unsched
        ),
        "ephemeral doesn't when node volume limit <= pods ephemeral CSI volume": Case(
            claims_pod(f"csi-{EBS}-0", name="ebs-one", ns="test"),
            [EBS],
            [claims_pod(f"csi-{EBS}-3", name="running", ns="test"), eph_two],
            "csinode",
            2,
            extra_claims=[owned_claim(eph_two, "x"), owned_claim(eph_two, "y")],
            want=unsched,
        ),
        "persistent doesn't when node volume limit <= pods ephemeral CSI volume + persistent volume": Case(
            claims_pod(f"csi-{EBS}-0", name="ebs-one", ns="test"),
            [EBS],
            [claims_pod(f"csi-{EBS}-3", name="running", ns="test"), eph, claims_pod(f"csi-{EBS}-1", ns="test")],
            "csinode",
            3,
            extra_claims=[eph_claim],
            want=unsched,
        ),
        "persistent okay when node volume limit > pods ephemeral CSI volume + persistent volume": Case(
            claims_pod(f"csi-{EBS}-0", name="ebs-one", ns="test"),
            [EBS],
            [claims_pod(f"csi-{EBS}-3", name="running", ns="test"), eph, claims_pod(f"csi-{EBS}-1", ns="test")],
            "csinode",
            5,
            extra_claims=[eph_claim],
        ),
        "skip Filter when the pod only uses secrets and configmaps": Case(
            only_cm, [EBS], limit_source="csinode", max_vols=2, want_skip=True
        ),
        "don't skip Filter when the pod has pvcs": Case(pvc_cm, [EBS], limit_source="csinode", max_vols=2),
        "don't skip Filter when the pod has ephemeral volumes": Case(
            eph_cm, [EBS], limit_source="csinode-with-no-limit", want=not_found
        ),
        "don't skip Filter when the pod has inline migratable volumes": Case(
            inline_cm, [EBS_IN_TREE, EBS], [in_tree_two], "csinode", 2, want=unsched
        ),
    }


CASES = _cases()


@pytest.mark.parametrize("name", list(CASES))
def test_csi_limits(name: str) -> None:
    case = CASES[name]
    pre, got = run_case(case)
    if case.want_skip:
        assert pre is not None and pre.is_skip()
        return
    assert pre is None
    if case.want is None:
        assert got is None, got
    else:
        assert got is not None and (got.code, got.message()) == case.want


def bound(env: Env, name: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> None:
    """A PV ``name`` with source ``spec`` bound to claim ``name`` (both sides, as the PV controller leaves them)."""
    env.add_pv(
        {
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {**spec, "claimRef": {"name": name, "namespace": "default", "uid": f"uid-{name}"}},
            "status": {"phase": "Bound"},
        }
    )
    env.add_pvc(
        {
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"uid-{name}",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
            },
            "spec": {"volumeName": name},
            "status": {"phase": "Bound"},
        }
    )


def unbound(env: Env, name: str, cls: str) -> None:
    """A WaitForFirstConsumer claim of class ``cls`` (VolumeBinding provisions it anywhere)."""
    env.add_pvc({"metadata": {"name": name, "namespace": "default"}, "spec": {"storageClassName": cls}})


def ebs_csi(handle: str) -> dict[str, Any]:
    return {"csi": {"driver": EBS, "volumeHandle": handle}}


def test_the_full_message_and_preemption_code() -> None:
    env = Env()
    for n in ("n1", "n2"):
        env.add_node(node(n))
        env.s.volume_store().on_csinode_add(csi_node(n, [EBS], 1))
    for i in range(3):
        bound(env, f"ebs-{i}", ebs_csi(f"h{i}"))
    env.add_pod(claims_pod("ebs-0", name="a", node_name="n1"))
    # n2's one slot is taken by an attachment of a volume no pod of the cache uses.
    env.s.volume_store().on_attachment_add(attachment("va", "ebs-1", EBS, "n2"))
    assert env.schedule(claims_pod("ebs-2")) == f"0/2 nodes are available: 2 {MAX}." + DRA
    # A volume the pod shares with the node's pod is not new: it fits there.
    assert env.schedule(claims_pod("ebs-0", name="again")) == "n1"
    # Detaching frees the slot.
    env.s.volume_store().on_attachment_delete(attachment("va", "ebs-1", EBS, "n2"))
    assert env.schedule(claims_pod("ebs-2", name="later")) == "n2"


def test_attachments_that_do_not_count() -> None:
    env = Env()
    env.add_node(node(NODE))
    vs = env.s.volume_store()
    for i in range(3):
        bound(env, f"ebs-{i}", ebs_csi(f"h{i}"))
    bound(env, "in-tree", {"awsElasticBlockStore": {"volumeID": "vol-1"}})
    vs.on_csinode_add(csi_node(NODE, [EBS], 1))
    vs.on_attachment_add(attachment("no-attacher", "ebs-1", ""))
    vs.on_attachment_add(attachment("inline", None, EBS))
    vs.on_attachment_add(attachment("missing-pv", "nope", EBS))
    vs.on_attachment_add(attachment("in-tree-pv", "in-tree", EBS))
    vs.on_attachment_add(attachment("other-node", "ebs-2", EBS, "elsewhere"))
    assert env.feasible(claims_pod("ebs-0")) == {NODE}
    # An attachment moved to this node counts (the index follows spec.nodeName).
    old = attachment("other-node", "ebs-2", EBS, "elsewhere")
    vs.on_attachment_update(old, attachment("other-node", "ebs-2", EBS))
    assert env.feasible(claims_pod("ebs-0")) == set()
    # Upstream only takes the volumes of the node's *pods* out of the new ones, not those of its
    # attachments: a pod of the attached volume counts it twice and does not fit either.
    assert env.feasible(claims_pod("ebs-2")) == set()
    env.add_pod(claims_pod("ebs-2", name="user", node_name=NODE))
    assert env.feasible(claims_pod("ebs-2", name="second")) == {NODE}


def test_unbound_claim_of_an_in_tree_class_and_portworx_needs_the_annotation() -> None:
    env = Env()
    env.add_node(node(NODE))
    vs = env.s.volume_store()
    for cls, prov in (("gce", "kubernetes.io/gce-pd"), ("px", "kubernetes.io/portworx-volume")):
        env.add_storage_class(
            {"metadata": {"name": cls}, "provisioner": prov, "volumeBindingMode": "WaitForFirstConsumer"}
        )
    for name, cls in (("g1", "gce"), ("g2", "gce"), ("x1", "px"), ("x2", "px")):
        unbound(env, name, cls)
    vs.on_csinode_add(csi_node(NODE, [GCE, "pxd.portworx.com"], 1, migrated=""))
    env.add_pod(claims_pod("g1", "x1", name="there", node_name=NODE))
    assert env.feasible(claims_pod("g2")) == set()  # GCE PD: migrated whenever the node has a CSINode
    assert env.feasible(claims_pod("x2")) == {NODE}  # Portworx: only with the annotation
    vs.on_csinode_update(
        csi_node(NODE, [GCE, "pxd.portworx.com"], 1, migrated=""),
        csi_node(NODE, [GCE, "pxd.portworx.com"], 1, migrated="kubernetes.io/portworx-volume"),
    )
    assert env.feasible(claims_pod("x2")) == set()


def test_gce_pv_handles_follow_zone_labels_so_shared_volumes_count_once() -> None:
    env = Env()
    env.add_node(node(NODE))
    vs = env.s.volume_store()
    vs.on_csinode_add(csi_node(NODE, [GCE], 1))
    bound(env, "pd", {"gcePersistentDisk": {"pdName": "disk"}}, {"topology.kubernetes.io/zone": "us-east1-b"})
    env.add_pod(claims_pod("pd", name="there", node_name=NODE))
    # The same disk through the claim again is the same volume; an inline GCE disk is another
    # (its handle has no zone), so it does not fit. VolumeRestrictions would refuse it anyway.
    assert env.feasible(claims_pod("pd")) == {NODE}
    pl = env.s.frameworks["ome-scheduler"].plugins["NodeVolumeLimits"]
    ni = env.s.cache.get_node_info(NODE)
    assert isinstance(pl, NodeVolumeLimits) and ni is not None
    inline = PodInfo(volumes_pod({"name": "d", "gcePersistentDisk": {"pdName": "disk"}}))
    st = pl.filter(CycleState(), inline, ni)
    assert st is not None and st.message() == MAX


def test_errors_of_the_new_pod_and_of_the_pods_on_the_node() -> None:
    env = Env()
    env.add_node(node(NODE))
    vs = env.s.volume_store()
    vs.on_csinode_add(csi_node(NODE, [EBS], 5))
    fake_volumes(env, [EBS])
    pl = env.s.frameworks["ome-scheduler"].plugins["NodeVolumeLimits"]
    ni = env.s.cache.get_node_info(NODE)
    assert isinstance(pl, NodeVolumeLimits) and ni is not None
    bad = volumes_pod(ebs_inline("aws://zone/not-a-volume", name="bad"))
    st = pl.filter(CycleState(), PodInfo(bad), ni)
    assert st is not None and st.code == Code.ERROR
    assert st.message() == (
        "converting volume(bad) from inline to csi: failed to translate Kubernetes ID to EBS Volume ID "
        "Invalid format for AWS volume (aws://zone/not-a-volume)"
    )
    assert pl.filter(CycleState(), PodInfo(volumes_pod(ebs_inline("aws://zone/vol-1"))), ni) is None
    shared = volumes_pod({"name": "s", "azureDisk": {"diskURI": "u", "diskName": "d", "kind": "Shared"}})
    st = pl.filter(CycleState(), PodInfo(shared), ni)
    assert (
        st is not None
        and st.message() == "converting volume(s) from inline to csi: kind(Shared) is not supported in csi migration"
    )
    st = pl.filter(CycleState(), PodInfo(claims_pod("")), ni)
    assert st is not None and (st.code, st.message()) == (Code.ERROR, "PersistentVolumeClaim had no name")
    # A pod on the node whose claim is gone is skipped; one whose inline volume is bad is an Error.
    env.add_pod(claims_pod("gone", name="stale", node_name=NODE))
    assert pl.filter(CycleState(), PodInfo(claims_pod(f"csi-{EBS}-0")), ni) is None
    env.add_pod(volumes_pod(ebs_inline("aws://z/x", name="w"), name="broken", node_name=NODE))
    st = pl.filter(CycleState(), PodInfo(claims_pod(f"csi-{EBS}-0")), ni)
    assert st is not None and st.code == Code.ERROR


# ---- queueing hints (TestCSILimitsQHint and its neighbours) ------------------------------------


def test_pod_deleted_hint() -> None:
    target = claims_pod(f"csi-{EBS}-2")
    assert (
        is_schedulable_after_pod_deleted(target, claims_pod("placeholder", node_name="n"), None) == QueueingHint.QUEUE
    )
    assert (
        is_schedulable_after_pod_deleted(target, volumes_pod(ebs_inline("aws-inline1"), node_name="n"), None)
        == QueueingHint.QUEUE
    )
    assert is_schedulable_after_pod_deleted(target, pod("q", node_name="n"), None) == QueueingHint.QUEUE_SKIP
    assert is_schedulable_after_pod_deleted(target, claims_pod("placeholder"), None) == QueueingHint.QUEUE_SKIP
    cm = volumes_pod({"name": "cm", "configMap": {"name": "c"}}, node_name="n")
    assert is_schedulable_after_pod_deleted(target, cm, None) == QueueingHint.QUEUE_SKIP


def _pvc(name: str, ns: str = "default") -> PersistentVolumeClaim:
    return msgspec.convert({"metadata": {"name": name, "namespace": ns}}, PersistentVolumeClaim)


def test_pvc_added_hint() -> None:
    target = claims_pod("pvc1")
    assert is_schedulable_after_pvc_added(target, None, _pvc("pvc1", "other")) == QueueingHint.QUEUE_SKIP
    assert is_schedulable_after_pvc_added(target, None, _pvc("pvc1")) == QueueingHint.QUEUE
    eph = volumes_pod(ephemeral("ephemeral"), name="p")
    assert is_schedulable_after_pvc_added(eph, None, _pvc("p-ephemeral")) == QueueingHint.QUEUE
    assert is_schedulable_after_pvc_added(target, None, _pvc("pvc2")) == QueueingHint.QUEUE_SKIP
    assert is_schedulable_after_pvc_added(pod("none"), None, _pvc("pvc1")) == QueueingHint.QUEUE_SKIP


def test_volume_attachment_deleted_hint() -> None:
    va_ebs = attachment("va", "pv", EBS)
    assert is_schedulable_after_attachment_deleted(claims_pod("c"), va_ebs, None) == QueueingHint.QUEUE
    assert (
        is_schedulable_after_attachment_deleted(volumes_pod(ebs_inline("aws-inline1")), va_ebs, None)
        == QueueingHint.QUEUE
    )
    gce = volumes_pod({"name": "g", "gcePersistentDisk": {"pdName": "d"}})
    assert is_schedulable_after_attachment_deleted(gce, va_ebs, None) == QueueingHint.QUEUE_SKIP
    both = volumes_pod(ebs_inline("aws-inline1"), {"name": "v", "persistentVolumeClaim": {"claimName": "c"}})
    assert is_schedulable_after_attachment_deleted(both, va_ebs, None) == QueueingHint.QUEUE
    assert is_schedulable_after_attachment_deleted(pod("none"), va_ebs, None) == QueueingHint.QUEUE_SKIP
    # Ephemeral volumes are not looked at here, as upstream.
    assert is_schedulable_after_attachment_deleted(volumes_pod(ephemeral("e")), va_ebs, None) == QueueingHint.QUEUE_SKIP


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        (1, 2, QueueingHint.QUEUE),  # limit raised
        (2, 1, QueueingHint.QUEUE_SKIP),  # limit decreased
        (1, 1, QueueingHint.QUEUE_SKIP),  # unchanged
        (None, 1, QueueingHint.QUEUE),  # a count appears
    ],
)
def test_csinode_updated_hint(old: int | None, new: int | None, want: QueueingHint) -> None:
    got = is_schedulable_after_csinode_updated(pod("p"), csi_node("n", [EBS], old), csi_node("n", [EBS], new))
    assert got == want


def test_events_reach_the_queue_through_the_store() -> None:
    """A pod NodeVolumeLimits rejected waits in the unschedulable pods: a CSINode update that
    raises no count leaves it there, a VolumeAttachment deleted moves it (it has a PVC)."""
    env = Env()
    env.add_node(node(NODE))
    vs = env.s.volume_store()
    fake_volumes(env, [EBS])
    vs.on_csinode_add(csi_node(NODE, [EBS], 1))
    vs.on_attachment_add(attachment("va", f"csi-{EBS}-1", EBS))
    q = env.s.queue
    qp = QueuedPodInfo(PodInfo(claims_pod(f"csi-{EBS}-0")))
    qp.unschedulable_plugins = {"NodeVolumeLimits"}
    q.unschedulable[qp.pod_info.pod_key] = qp
    vs.on_csinode_update(csi_node(NODE, [EBS], 1), csi_node(NODE, [EBS], 1))
    assert qp.pod_info.pod_key in q.unschedulable
    vs.on_attachment_delete(attachment("va", f"csi-{EBS}-1", EBS))
    assert qp.pod_info.pod_key not in q.unschedulable


def test_a_csinode_with_null_topology_keys_or_no_drivers_decodes_and_limits() -> None:
    """Go writes nil slices without omitempty as ``null``: a kubelet's CSINode has
    ``topologyKeys: null`` for a driver without topology and ``drivers: null`` before any
    driver registers. Both decode (an informer skipping them would drop the node's limits)."""
    raw = b'{"metadata":{"name":"n"},"spec":{"drivers":[{"name":"d","nodeID":"n","topologyKeys":null,"allocatable":{"count":0}}]}}'
    assert msgspec.json.decode(raw, type=CSINode).volume_limits() == {"d": 0}
    empty = msgspec.json.decode(b'{"metadata":{"name":"n"},"spec":{"drivers":null}}', type=CSINode)
    assert empty.volume_limits() == {}
    assert is_schedulable_after_csinode_updated(claims_pod("c"), empty, empty) is QueueingHint.QUEUE_SKIP
