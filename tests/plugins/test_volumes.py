"""VolumeRestrictions, VolumeBinding, VolumeZone (NodeVolumeLimits: test_nodevolumelimits.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from ome_scheduler.api.storage import CSIDriver, CSIStorageCapacity
from ome_scheduler.framework.events import QueueingHint
from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.status import Code
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.plugins.volumebinding import (
    VolumeBinding,
    is_schedulable_after_capacity_change,
    is_schedulable_after_csidriver_change,
)
from ome_scheduler.plugins.volumestore import pv_node_affinity_matches
from tests.support.plugins_env import Env, node, pod

DRA = " no new claims to deallocate"
ZONE = "topology.kubernetes.io/zone"


def sc(
    name: str, mode: str = "WaitForFirstConsumer", provisioner: str = "kubernetes.io/no-provisioner", **kw: Any
) -> dict[str, Any]:
    return {"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode, **kw}


def pv(
    name: str,
    cls: str,
    size: str = "5Gi",
    *,
    hosts: list[str] | None = None,
    claim: str | None = None,
    labels: dict[str, str] | None = None,
    phase: str = "Available",
    modes: list[str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": modes or ["ReadWriteOnce"],
        "storageClassName": cls,
    }
    if hosts:
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}]}
                ]
            }
        }
    if claim:
        spec["claimRef"] = {"name": claim, "namespace": "default"}
    return {
        "metadata": {"name": name, "labels": labels or {}, "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": phase},
    }


def pvc(
    name: str,
    cls: str,
    size: str = "1Gi",
    *,
    volume: str = "",
    bound: bool = False,
    modes: list[str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    ann = dict(annotations or {})
    if bound:
        ann["pv.kubernetes.io/bind-completed"] = "yes"
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "annotations": ann,
            "resourceVersion": "1",
        },
        "spec": {
            "storageClassName": cls,
            "accessModes": modes or ["ReadWriteOnce"],
            "volumeName": volume,
            "resources": {"requests": {"storage": size}},
        },
    }


def with_claims(*names: str) -> Any:
    return pod(
        "p",
        spec={"volumes": [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": n}} for i, n in enumerate(names)]},
    )


def env3() -> Env:
    env = Env()
    for n, z in (("n1", "z1"), ("n2", "z1"), ("n3", "z2")):
        env.add_node(node(n, {ZONE: z}))
    env.add_storage_class(sc("imm", "Immediate"))
    env.add_storage_class(sc("wffc"))
    return env


def test_missing_claim_is_rejected_by_volume_restrictions_prefilter() -> None:
    env = env3()
    assert (
        env.schedule(with_claims("nope"))
        == '0/3 nodes are available: persistentvolumeclaim "nope" not found. not found'
    )


def test_unbound_immediate_claim() -> None:
    env = env3()
    env.add_pvc(pvc("c", "imm"))
    assert env.schedule(with_claims("c")) == (
        "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"
    )


def test_bound_pv_node_affinity_and_missing_pv() -> None:
    env = env3()
    env.add_pv(pv("pv1", "imm", hosts=["n2"], claim="c", phase="Bound"))
    env.add_pvc(pvc("c", "imm", volume="pv1", bound=True))
    assert env.feasible(with_claims("c")) == {"n2"}
    env.add_pvc(pvc("d", "imm", volume="ghost", bound=True))
    # VolumeZone's PreFilter (after VolumeBinding's) looks the PV up first.
    assert env.schedule(with_claims("d")) == '0/3 nodes are available: persistentvolume "ghost" not found. not found'
    pl = env.s.frameworks["ome-scheduler"].plugins["VolumeBinding"]
    state = CycleState()
    pi = PodInfo(with_claims("d"))
    pl.pre_filter(state, pi, env.s.node_infos())  # type: ignore[attr-defined]
    st = pl.filter(state, pi, env.s.node_infos()[0])  # type: ignore[attr-defined]
    assert st is not None and st.reasons == [
        "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
    ]
    msg = env.schedule(
        pod(
            "q",
            spec={
                "nodeSelector": {ZONE: "z2"},
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}],
            },
        )
    )
    assert msg == (
        "0/3 nodes are available: 1 node(s) didn't match PersistentVolume's node affinity, "
        "2 node(s) didn't match Pod's node affinity/selector." + DRA
    )


def test_wait_for_first_consumer_matches_available_pvs_per_node() -> None:
    env = env3()
    env.add_pv(pv("small", "wffc", "500Mi", hosts=["n1"]))
    env.add_pv(pv("ok", "wffc", "2Gi", hosts=["n3"]))
    env.add_pv(pv("taken", "wffc", "2Gi", hosts=["n2"], claim="someone-else", phase="Bound"))
    env.add_pvc(pvc("c", "wffc"))
    assert env.feasible(with_claims("c")) == {"n3"}
    env2 = env3()
    env2.add_pvc(pvc("c", "wffc"))
    assert env2.schedule(with_claims("c")) == (
        "0/3 nodes are available: 3 node(s) didn't find available persistent volumes to bind." + DRA
    )


def test_provisioning_topology_and_selected_node() -> None:
    env = env3()
    env.add_storage_class(
        sc(
            "dyn",
            provisioner="example.com/p",
            allowedTopologies=[{"matchLabelExpressions": [{"key": ZONE, "values": ["z2"]}]}],
        )
    )
    env.add_pvc(pvc("c", "dyn"))
    assert env.feasible(with_claims("c")) == {"n3"}
    env.add_pvc(pvc("d", "dyn", annotations={"volume.kubernetes.io/selected-node": "n1"}))
    assert env.feasible(with_claims("d")) == set()


def test_claim_without_known_class_is_an_error() -> None:
    env = env3()
    env.add_pvc(pvc("c", "wffc"))
    env.s.volume_store().on_class_delete(env.s.volume_store().storage_class("wffc"))  # type: ignore[arg-type]
    # Without its class the claim is not delay-binding: an unbound immediate claim.
    assert "pod has unbound immediate PersistentVolumeClaims" in env.schedule(with_claims("c"))


def test_pv_node_affinity_ignores_match_fields_like_upstream() -> None:
    import msgspec

    from ome_scheduler.api.core import PersistentVolume

    v = msgspec.convert(
        {
            "spec": {
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["elsewhere"]}]}
                        ]
                    }
                }
            }
        },
        PersistentVolume,
    )
    assert pv_node_affinity_matches(v, {})


def test_read_write_once_pod_in_use() -> None:
    env = env3()
    env.add_pv(pv("pv1", "imm", claim="c", phase="Bound", modes=["ReadWriteOncePod"]))
    env.add_pvc(pvc("c", "imm", volume="pv1", bound=True, modes=["ReadWriteOncePod"]))
    assert env.feasible(with_claims("c")) == {"n1", "n2", "n3"}
    env.add_pod(
        pod("user", node_name="n1", spec={"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]})
    )
    assert env.schedule(with_claims("c")) == (
        "0/3 nodes are available: 3 node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access "
        "mode already in-use by another pod." + DRA
    )


def test_in_tree_disk_conflict() -> None:
    env = env3()
    gce = {"name": "d", "gcePersistentDisk": {"pdName": "disk1"}}
    env.add_pod(pod("x", node_name="n1", spec={"volumes": [gce]}))
    assert env.feasible(pod("p", spec={"volumes": [gce]})) == {"n2", "n3"}
    ro = {"name": "d", "gcePersistentDisk": {"pdName": "disk2", "readOnly": True}}
    env.add_pod(pod("y", node_name="n2", spec={"volumes": [ro]}))
    assert "n2" in env.feasible(pod("p", spec={"volumes": [ro]}))


def test_volume_zone() -> None:
    env = env3()
    env.add_node(node("nz", {}))  # no topology labels: always passes
    env.add_pv(pv("pv1", "imm", claim="c", phase="Bound", labels={ZONE: "z1__z3"}))
    env.add_pvc(pvc("c", "imm", volume="pv1", bound=True))
    assert env.feasible(with_claims("c")) == {"n1", "n2", "nz"}
    env.add_pv(pv("pv2", "imm", claim="d", phase="Bound", labels={"failure-domain.beta.kubernetes.io/zone": "z2"}))
    env.add_pvc(pvc("d", "imm", volume="pv2", bound=True))
    assert env.feasible(with_claims("d")) == {"n3", "nz"}
    env.add_pvc(pvc("e", "wffc"))
    env.add_pv(pv("free", "wffc", hosts=["n1", "n2", "n3", "nz"]))
    assert env.feasible(with_claims("e")) == {"n1", "n2", "n3", "nz"}


def test_reserve_assumes_and_prebind_writes_then_waits() -> None:
    env = env3()
    env.add_pv(pv("local", "wffc", hosts=["n3"]))
    env.add_pvc(pvc("c", "wffc"))
    fw = env.s.frameworks["ome-scheduler"]
    pl = fw.plugins["VolumeBinding"]
    assert isinstance(pl, VolumeBinding)
    writes: list[tuple[str, Any]] = []

    class Client:
        async def patch(self, path: str, body: Any, content_type: str = "", **kw: Any) -> bytes:
            writes.append((path, body))
            vs = env.s.volume_store()
            old = vs.pv_api_object("local")
            assert old is not None
            import msgspec

            from ome_scheduler.api.core import ObjectReference

            bound = msgspec.structs.replace(
                old,
                metadata=msgspec.structs.replace(old.metadata, resource_version="2"),
                spec=msgspec.structs.replace(
                    old.spec, claim_ref=ObjectReference(name="c", namespace="default", uid="uid-c")
                ),
            )
            vs.on_pv_update(old, bound)
            claim = vs.pvc_api_object("default", "c")
            assert claim is not None
            done = msgspec.structs.replace(
                claim,
                metadata=msgspec.structs.replace(
                    claim.metadata, resource_version="2", annotations={"pv.kubernetes.io/bind-completed": "yes"}
                ),
                spec=msgspec.structs.replace(claim.spec, volume_name="local"),
            )
            vs.on_pvc_update(claim, done)
            return b"{}"

    pl.client = Client()  # type: ignore[assignment]
    p = with_claims("c")
    host, msg, state = env.attempt(p)
    assert host == "n3", msg
    pi = PodInfo(p)
    assert pl.reserve(state, pi, host) is None
    assumed = env.s.volume_store().pv("local")
    assert assumed is not None and assumed.spec.claim_ref is not None and assumed.spec.claim_ref.name == "c"
    # A second pod now sees the PV as taken.
    assert env.feasible(with_claims("c")) == {"n3"}  # same claim: the PV is bound to it
    assert asyncio.run(pl.pre_bind(state, pi, host)) is None
    assert writes and writes[0][0] == "/api/v1/persistentvolumes/local"
    assert writes[0][1]["spec"]["claimRef"]["name"] == "c"


def test_unreserve_restores_assumed_pv() -> None:
    env = env3()
    env.add_pv(pv("local", "wffc", hosts=["n3"]))
    env.add_pvc(pvc("c", "wffc"))
    pl = env.s.frameworks["ome-scheduler"].plugins["VolumeBinding"]
    p = with_claims("c")
    host, _, state = env.attempt(p)
    pl.reserve(state, PodInfo(p), host)  # type: ignore[attr-defined]
    assert env.s.volume_store().pv("local").spec.claim_ref is not None  # type: ignore[union-attr]
    pl.unreserve(state, PodInfo(p), host)  # type: ignore[attr-defined]
    assert env.s.volume_store().pv("local").spec.claim_ref is None  # type: ignore[union-attr]


def test_node_volume_limits_skips_pods_without_volumes() -> None:
    env = env3()
    fw = env.s.frameworks["ome-scheduler"]
    state = CycleState()
    fw.run_pre_filter(state, PodInfo(pod("p")), env.s.node_infos())
    assert "NodeVolumeLimits" in state.skip_filter_plugins
    assert "VolumeBinding" in state.skip_filter_plugins


def test_volume_attributes_class_must_match() -> None:
    """VolumeAttributesClass (GA in 1.34): an unbound claim only matches PVs of its
    ``volumeAttributesClassName`` (unset on both sides is a match)."""
    env = env3()
    gold = pv("gold", "wffc", hosts=["n1"])
    gold["spec"]["volumeAttributesClassName"] = "gold"
    env.add_pv(gold)
    env.add_pv(pv("plain", "wffc", hosts=["n2"]))
    claim = pvc("c", "wffc")
    claim["spec"]["volumeAttributesClassName"] = "gold"
    env.add_pvc(claim)
    env.add_pvc(pvc("d", "wffc"))
    assert env.feasible(with_claims("c")) == {"n1"}
    assert env.feasible(with_claims("d")) == {"n2"}


# ---- CSIStorageCapacity (TestCapacity of upstream's binder_test.go) ------------------------------

CAP_CLASS = "wait-with-provisioner"
DRIVER = "test-provisioner"


def capacity(
    name: str, cls: str = CAP_CLASS, node_name: str | None = None, cap: str = "", max_size: str = ""
) -> dict[str, Any]:
    """``makeCapacity``: every node when ``node_name`` is None (an empty nodeTopology)."""
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default"},
        "storageClassName": cls,
        "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": node_name}} if node_name else {},
    }
    if cap:
        raw["capacity"] = cap
    if max_size:
        raw["maximumVolumeSize"] = max_size
    return raw


CAPACITY_CASES: dict[str, tuple[list[dict[str, Any]], bool]] = {
    "network-attached": ([capacity("net", cap="1Gi")], True),
    "local-storage": ([capacity("net", node_name="n1", cap="1Gi")], True),
    "multiple": (
        [
            capacity("net", cap="1Gi"),
            capacity("n2", node_name="n2", cap="1Gi"),
            capacity("n1", node_name="n1", cap="1Gi"),
        ],
        True,
    ),
    "no-storage": ([], False),
    "wrong-node": ([capacity("net", node_name="n2", cap="1Gi")], False),
    "wrong-storage-class": ([capacity("net", cls="wffc", node_name="n1", cap="1Gi")], False),
    "insufficient-storage": ([capacity("net", node_name="n1", cap="1Mi")], False),
    "insufficient-volume-size": ([capacity("net", node_name="n1", cap="1Gi", max_size="1Mi")], False),
    "zero-storage": ([capacity("net", node_name="n1", cap="0Mi")], False),
    "zero-volume-size": ([capacity("net", node_name="n1", max_size="0Mi")], False),
    "nil-storage": ([capacity("net", node_name="n1")], False),
}


@pytest.mark.parametrize("opt_in", [True, False])
@pytest.mark.parametrize("name", list(CAPACITY_CASES))
def test_capacity(name: str, opt_in: bool) -> None:
    caps, fits = CAPACITY_CASES[name]
    env = env3()
    vs = env.s.volume_store()
    env.add_storage_class(sc(CAP_CLASS, provisioner=DRIVER))
    vs.on_csidriver_add(msgspec.convert({"metadata": {"name": DRIVER}, "spec": {"storageCapacity": opt_in}}, CSIDriver))
    for raw in caps:
        vs.on_capacity_add(msgspec.convert(raw, CSIStorageCapacity))
    env.add_pvc(pvc("provisioned-pvc", CAP_CLASS, "1Gi"))
    p = pod(
        "p",
        spec={"nodeName": "", "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "provisioned-pvc"}}]},
    )
    n1 = env.s.cache.get_node_info("n1")
    assert n1 is not None
    pl = env.s.frameworks["ome-scheduler"].plugins["VolumeBinding"]
    state = CycleState()
    pi = PodInfo(p)
    assert pl.pre_filter(state, pi, env.s.node_infos()) == (None, None)  # type: ignore[attr-defined]
    st = pl.filter(state, pi, n1)  # type: ignore[attr-defined]
    if fits or not opt_in:
        assert st is None, st
    else:
        assert st is not None and st.reasons == ["node(s) did not have enough free storage"]


def test_a_claim_without_a_storage_request_or_of_another_driver_is_not_checked() -> None:
    env = env3()
    vs = env.s.volume_store()
    env.add_storage_class(sc(CAP_CLASS, provisioner=DRIVER))
    vs.on_csidriver_add(msgspec.convert({"metadata": {"name": DRIVER}, "spec": {"storageCapacity": True}}, CSIDriver))
    claim = pvc("c", CAP_CLASS)
    claim["spec"]["resources"] = {}
    env.add_pvc(claim)
    assert env.feasible(with_claims("c")) == {"n1", "n2", "n3"}
    env.add_pvc(pvc("d", CAP_CLASS))
    assert (
        env.schedule(with_claims("d")) == "0/3 nodes are available: 3 node(s) did not have enough free storage." + DRA
    )
    vs.on_capacity_add(msgspec.convert(capacity("z2", node_name="n3", cap="10Gi"), CSIStorageCapacity))
    assert env.feasible(with_claims("d")) == {"n3"}


def test_capacity_and_driver_hints() -> None:
    def cap(c: str = "", m: str = "") -> CSIStorageCapacity:
        return msgspec.convert(capacity("x", cap=c, max_size=m), CSIStorageCapacity)

    def drv(on: bool | None) -> CSIDriver:
        return msgspec.convert({"metadata": {"name": DRIVER}, "spec": {"storageCapacity": on}}, CSIDriver)

    p = pod("p")
    assert is_schedulable_after_capacity_change(p, None, cap("1Gi")) == QueueingHint.QUEUE
    assert is_schedulable_after_capacity_change(p, cap("1Gi"), cap("2Gi")) == QueueingHint.QUEUE
    assert is_schedulable_after_capacity_change(p, cap("2Gi"), cap("1Gi")) == QueueingHint.QUEUE_SKIP
    assert is_schedulable_after_capacity_change(p, cap(), cap("1Gi")) == QueueingHint.QUEUE
    assert is_schedulable_after_capacity_change(p, cap("5Gi", "1Gi"), cap("5Gi", "1Gi")) == QueueingHint.QUEUE_SKIP
    inline = pod("q", spec={"volumes": [{"name": "v", "csi": {"driver": DRIVER}}]})
    assert is_schedulable_after_csidriver_change(inline, drv(True), drv(False)) == QueueingHint.QUEUE
    assert is_schedulable_after_csidriver_change(inline, drv(True), drv(None)) == QueueingHint.QUEUE
    assert is_schedulable_after_csidriver_change(inline, drv(False), drv(True)) == QueueingHint.QUEUE_SKIP
    assert is_schedulable_after_csidriver_change(p, drv(True), drv(False)) == QueueingHint.QUEUE_SKIP


def test_prebind_preflight_has_work_only_for_claims_still_to_bind() -> None:
    """``PreBindPreFlight``: Success after Reserve assumed a binding, an Error for a node the
    cycle found no volumes for; Skip for a pod without claims and for bound claims."""
    env = env3()
    env.add_pv(pv("local", "wffc", hosts=["n3"]))
    env.add_pvc(pvc("c", "wffc"))
    pl = env.s.frameworks["ome-scheduler"].plugins["VolumeBinding"]
    assert isinstance(pl, VolumeBinding)
    p = with_claims("c")
    host, msg, state = env.attempt(p)
    assert host == "n3", msg
    pi = PodInfo(p)
    assert pl.reserve(state, pi, host) is None
    assert pl.pre_bind_pre_flight(state, pi, host) is None
    st = pl.pre_bind_pre_flight(state, pi, "n1")
    assert st is not None and st.code == Code.ERROR and st.message() == 'no pod volume found for node "n1"'
    plain = pod("plain")
    host, msg, state = env.attempt(plain)
    assert host, msg
    assert pl.reserve(state, PodInfo(plain), host) is None
    skip = pl.pre_bind_pre_flight(state, PodInfo(plain), host)
    assert skip is not None and skip.is_skip()
