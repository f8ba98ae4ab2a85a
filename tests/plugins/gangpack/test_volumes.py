"""The gang room counts CSI attach limits (design §3.1; issue 27).

A member needing ``k`` new attachments of a limited driver fits ``(limit - used) // k`` times on a
node, counted as NodeVolumeLimits counts (pods' volumes and VolumeAttachments, unique handles);
members sharing one claim attach it once. Domains are labelled ``DK``; members ask 1 GPU, so by
resources alone domain ``a`` (one node of 8 GPUs) is the best fit for a gang of 3.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from ome_scheduler.api.core import PersistentVolume, PersistentVolumeClaim
from ome_scheduler.api.storage import CSINode
from ome_scheduler.framework.events import CSI_NODE, VOLUME_ATTACHMENT, QueueingHint
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.plugins.gangpack.volumes import AttachRoom
from ome_scheduler.plugins.volumestore import VolumeStore
from tests.plugins.gangpack.test_plugin import DK, plugin, prefilter, schedule
from tests.plugins.test_nodevolumelimits import attachment, csi_node
from tests.support.builders import make_node, make_pod, make_pod_group
from tests.support.fakes import FakeHandle
from tests.support.plugins_env import Env, chart_config

D = "ebs.csi.aws.com"


class VolumeHandle(FakeHandle):
    """A FakeHandle with a VolumeStore (PVs, claims, CSINodes, VolumeAttachments)."""

    def __init__(self) -> None:
        super().__init__()
        self.volumes = VolumeStore()

    def volume_store(self) -> VolumeStore:
        return self.volumes

    def pv(self, name: str, handle: str, driver: str = D) -> None:
        raw = {"metadata": {"name": name}, "spec": {"csi": {"driver": driver, "volumeHandle": handle}}}
        self.volumes.on_pv_add(msgspec.convert(raw, PersistentVolume))

    def claim(self, name: str, pv: str, modes: tuple[str, ...] = ("ReadWriteOnce",)) -> None:
        raw = {"metadata": {"name": name, "namespace": "ns"}, "spec": {"volumeName": pv, "accessModes": list(modes)}}
        self.volumes.on_pvc_add(msgspec.convert(raw, PersistentVolumeClaim))

    def limit(self, node: str, count: int | None) -> CSINode:
        cn = csi_node(node, [D], count, migrated="")
        self.volumes.on_csinode_add(cn)
        return cn


def cluster(limits: dict[str, int | None]) -> VolumeHandle:
    """Domain a: node a1; domain b: nodes b1, b2 (8 GPUs each); CSINodes with these limits."""
    h = VolumeHandle()
    for name in ("a1", "b1", "b2"):
        h.add_node(make_node(name, {DK: name[0]}, alloc={"nvidia.com/gpu": "8"}))
        if name in limits:
            h.limit(name, limits[name])
    return h


def volume_spec(*claims: str) -> dict[str, Any]:
    return {"volumes": [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]}


def gang(h: VolumeHandle, n: int, claims: list[list[str]] | None = None) -> list[PodInfo]:
    """A PodGroup g of minMember n; member i uses ``claims[i]`` (default: its own claim data-i)."""
    h.groups["ns/g"] = make_pod_group("g", min_member=n, topology_key=DK)
    out = []
    for i in range(n):
        own = claims[i] if claims is not None else [f"data-{i}"]
        for c in own:
            if h.volumes.pvc_api_object("ns", c) is None:
                h.pv(f"pv-{c}", f"vol-{c}")
                h.claim(c, f"pv-{c}")
        out.append(h.add_pod(make_pod(f"g-{i}", gang="g", requests={"nvidia.com/gpu": "1"}, spec=volume_spec(*own))))
    return out


def test_the_best_fit_that_cannot_attach_every_members_volume_is_passed_over() -> None:
    h = cluster({"a1": 2, "b1": 2, "b2": 2})
    p, _ = plugin(h)
    g = gang(h, 3)
    r, s, _ = prefilter(p, h, g[0])
    assert s is None and r == {"b1", "b2"}  # a1 attaches 2 of the 3 members' volumes; b attaches 4
    assert p.gangs.pins.get(g[0].gang_key) is not None
    assert p.gangs.pins.by_group[g[0].gang_key].domain.value == "b"


def test_without_limits_the_resource_best_fit_wins() -> None:
    h = cluster({"a1": None})  # a CSINode without a count, and nodes without a CSINode: no limit
    p, _ = plugin(h)
    g = gang(h, 3)
    r, s, _ = prefilter(p, h, g[0])
    assert s is None and r == {"a1"}


def test_members_sharing_one_claim_attach_it_once() -> None:
    h = cluster({"a1": 1, "b1": 1, "b2": 1})
    p, _ = plugin(h)
    g = gang(h, 3, claims=[["shared"]] * 3)
    r, s, _ = prefilter(p, h, g[0])
    assert s is None and r == {"a1"}  # one attachment for the three of them
    room = AttachRoom(h, g)
    assert room.shared_claims == {"ns/shared"}
    assert room.capacity(g[0], h.nodes["a1"]) == 8


def test_a_shared_claim_and_an_own_claim() -> None:
    h = cluster({"a1": 3})
    g = gang(h, 3, claims=[["shared", f"data-{i}"] for i in range(3)])
    room = AttachRoom(h, g)
    cap = room.limit(g[0], h.nodes["a1"])
    assert cap is not None and (cap.members, cap.driver, cap.free, cap.per_member) == (2, D, 3, 1)
    assert room.capacity(g[0], h.nodes["a1"]) == 2  # the shared volume once, then one each


def test_attachments_and_the_nodes_pods_count_as_used() -> None:
    h = cluster({"a1": 4, "b1": 4, "b2": 4})
    h.pv("pv-old", "vol-old")
    h.volumes.on_attachment_add(attachment("va-old", "pv-old", D, node_name="a1"))  # detaching, no pod
    h.pv("pv-other", "vol-other")
    h.claim("other", "pv-other")
    h.bind(make_pod("other", requests={"nvidia.com/gpu": "1"}, spec=volume_spec("other")), "a1")
    p, _ = plugin(h)
    g = gang(h, 3)
    assert AttachRoom(h, g).capacity(g[0], h.nodes["a1"]) == 2  # 4 - (attachment + the pod's volume)
    r, s, _ = prefilter(p, h, g[0])
    assert s is None and r == {"b1", "b2"}


def test_a_volume_already_on_the_node_is_not_new() -> None:
    h = cluster({"a1": 1})
    g = gang(h, 2, claims=[["data-0"], ["data-1"]])
    h.bind(make_pod("user", requests={"nvidia.com/gpu": "1"}, spec=volume_spec("data-0")), "a1")
    room = AttachRoom(h, g)
    assert room.limit(g[0], h.nodes["a1"]) is None  # data-0 is attached to a1 already
    assert room.capacity(g[1], h.nodes["a1"]) == 0  # data-1 would be a second volume


def test_candidates_leave_out_a_node_that_cannot_attach() -> None:
    h = cluster({"a1": 0, "b1": 0, "b2": 3})
    p, _ = plugin(h)
    g = gang(h, 3)
    r, s, _ = prefilter(p, h, g[0])
    assert s is None and r == {"b2"}


def test_no_domain_can_attach_the_gang() -> None:
    h = cluster({"a1": 1, "b1": 1, "b2": 1})
    p, _ = plugin(h)
    g = gang(h, 3)
    r, s, _ = prefilter(p, h, g[0])
    assert r is None and s is not None and s.message() == "no domain has room for gang ns/g"
    assert p.gangs.pins.get(g[0].gang_key) is None


def test_the_room_follows_attach_limits_as_members_are_placed() -> None:
    h = cluster({"a1": 3, "b1": 1, "b2": 1})
    p, _ = plugin(h)
    g = gang(h, 3)
    node, _, _ = schedule(p, h, g[0])
    assert node == "a1"
    h.volumes.on_csinode_update(csi_node("a1", [D], 3), csi_node("a1", [D], 1, migrated=""))  # a1 shrank
    r, s, _ = prefilter(p, h, g[1])
    assert r is None and s is not None  # the pinned domain cannot attach the rest now
    assert "cannot fit" in s.message()


def test_pods_without_volumes_use_the_room_index() -> None:
    h = cluster({"a1": 0, "b1": 0, "b2": 0})
    p, _ = plugin(h)
    h.groups["ns/g"] = make_pod_group("g", min_member=3, topology_key=DK)
    g = [h.add_pod(make_pod(f"g-{i}", gang="g", requests={"nvidia.com/gpu": "1"})) for i in range(3)]
    assert not AttachRoom(h, g).active
    r, s, _ = prefilter(p, h, g[0])
    assert s is None and r == {"a1"}  # attach limits do not concern it
    assert p.gangs.indexes  # the homogeneous gang read its room from the per-shape index
    v = gang(h, 3)
    p2, _ = plugin(h)
    prefilter(p2, h, v[0])
    assert not p2.gangs.indexes  # a gang attaching volumes plans from the snapshot


def test_a_profile_without_node_volume_limits_does_not_count_them() -> None:
    h = cluster({"a1": 0})
    g = gang(h, 3)
    h.runs_filter_plugin = lambda profile, name: False  # type: ignore[attr-defined]
    assert not AttachRoom(h, g).active


def test_hints_wake_volume_gangs_on_attach_limit_changes() -> None:
    h = cluster({})
    p, _ = plugin(h)
    g = gang(h, 2)
    plain = make_pod("plain", gang="g", requests={"nvidia.com/gpu": "1"})
    solo = make_pod("solo", spec=volume_spec("data-0"))
    old, grown = csi_node("a1", [D], 1, migrated=""), csi_node("a1", [D], 2, migrated="")
    raised = p.hints.is_schedulable_after_attach_limit_raised
    assert raised(g[0].pod, None, grown) == QueueingHint.QUEUE
    assert raised(g[0].pod, old, grown) == QueueingHint.QUEUE
    assert raised(g[0].pod, grown, old) == QueueingHint.QUEUE_SKIP
    assert raised(plain, old, grown) == QueueingHint.QUEUE_SKIP
    assert raised(solo, old, grown) == QueueingHint.QUEUE_SKIP
    detached = p.hints.is_schedulable_after_volume_detached
    va = attachment("va", "pv-data-0", D, node_name="a1")
    assert detached(g[0].pod, va, None) == QueueingHint.QUEUE
    assert detached(plain, va, None) == QueueingHint.QUEUE_SKIP
    assert detached(solo, va, None) == QueueingHint.QUEUE_SKIP
    assert {CSI_NODE, VOLUME_ATTACHMENT} <= {e.event.resource for e in p.events_to_register()}


def test_the_scheduler_tells_whether_a_profile_runs_node_volume_limits() -> None:
    cfg = chart_config()
    cfg["profiles"].append(copy.deepcopy(cfg["profiles"][0]))
    cfg["profiles"][1]["schedulerName"] = "no-limits"
    cfg["profiles"][1]["plugins"]["filter"] = {"disabled": [{"name": "NodeVolumeLimits"}]}
    s = Env(cfg).s
    assert s.runs_filter_plugin("ome-scheduler", "NodeVolumeLimits")
    assert not s.runs_filter_plugin("no-limits", "NodeVolumeLimits")
    assert not s.runs_filter_plugin("nobody", "NodeVolumeLimits")
    h = cluster({"a1": 0})
    g = gang(h, 2)
    limited = AttachRoom(h, g)
    h.runs_filter_plugin = s.runs_filter_plugin  # type: ignore[attr-defined]
    assert limited.active and AttachRoom(h, g).active  # the pods' profile is ome-scheduler
    h.runs_filter_plugin = lambda profile, name: s.runs_filter_plugin("no-limits", name)  # type: ignore[attr-defined]
    assert not AttachRoom(h, g).active
