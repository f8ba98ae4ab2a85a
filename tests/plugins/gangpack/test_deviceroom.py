"""Gangs on DRA devices: the device room (``plugins/gangpack/deviceroom.py``), on a real scheduler
with DynamicResources and OMEGangPack (the chart's profile) and an in-memory claim API."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from ome_scheduler.api.core import Pod
from ome_scheduler.api.resource import ResourceClaim
from ome_scheduler.api.snapshot import ClusterSnapshot
from ome_scheduler.config.load import parse_config
from ome_scheduler.framework.events import QueueingHint
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.plugins.dynamicresources.manager import DRAManager
from ome_scheduler.plugins.gangpack.deviceroom import (
    MSG_CANNOT_ALLOCATE,
    DeviceRoom,
    is_schedulable_after_claim_change,
    is_schedulable_after_slice_change,
)
from ome_scheduler.plugins.gangpack.fit import member_capacity
from ome_scheduler.tools.explainer import Explanation, explain, render_text
from tests.dra.objects import claim, device, device_class, local_node_selector, req, results, slice_
from tests.support.builders import make_node, make_pod_group, node_info
from tests.support.dra_env import World
from tests.support.manifests import chart_config, pod_group
from tests.support.manifests import node as node_manifest
from tests.support.manifests import pod as pod_manifest
from tests.support.plugins_env import pod
from tests.support.snapshots import snapshot

GPU = "gpu.nvidia.com"
CLIQUE = "nvidia.com/gpu.clique"


def gpu_slice(node: str, count: int, pool: str | None = None) -> Any:
    return slice_(
        f"{node}-gpus", pool or node, GPU, *(device(f"gpu-{i}", {"index": i}) for i in range(count)), node=node
    )


def member(gang: str, i: int, gpus: int = 4) -> tuple[Pod, ResourceClaim]:
    """A gang member whose ``gpu`` entry comes from a template, and the claim made for it."""
    name = f"{gang}-{i}"
    p = pod(
        name,
        labels={"scheduling.x-k8s.io/pod-group": gang},
        spec={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": f"{gang}-gpus"}]},
    )
    raw = msgspec.to_builtins(p)
    raw["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]}
    p = msgspec.convert(raw, Pod)
    owner = {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": p.metadata.uid, "controller": True}
    c = claim(f"{name}-gpu", req("gpu", GPU, gpus), ns="default", meta={"ownerReferences": [owner]})
    return p, c


def cluster(cliques: dict[str, list[int]], *, unsliced: tuple[str, ...] = ()) -> World:
    """Nodes ``<clique><i>`` labelled with their clique, each with the given node-local GPUs;
    ``unsliced`` nodes join their clique without a slice."""
    w = World(nodes=())
    w.add_class(device_class(GPU, GPU))
    for d, gpus in cliques.items():
        for i, n in enumerate(gpus):
            name = f"{d}{i + 1}"
            w.s.handlers.on_node_add(make_node(name, {CLIQUE: d}))
            if n and name not in unsliced:
                w.add_slice(gpu_slice(name, n))
    return w


def add_gang(w: World, gang: str, size: int, gpus: int = 4) -> list[Pod]:
    w.s.handlers.on_pod_group_add(make_pod_group(gang, "default", min_member=size, topology_key=CLIQUE))
    pods = []
    for i in range(size):
        p, c = member(gang, i, gpus)
        w.add_claim(c)
        pods.append(w.add_pod(p))
    return pods


def allocated(w: World) -> dict[str, list[str]]:
    """Claim name -> the devices its allocation holds (allocated claims only)."""
    out = {}
    for raw in w.api.objects.values():
        c = msgspec.convert(raw, ResourceClaim)
        if c.status.allocation is not None:
            out[c.metadata.name] = [f"{r.pool}/{r.device}" for r in c.status.allocation.devices.results]
    return out


async def drain(w: World, cycles: int) -> None:
    """Up to ``cycles`` scheduling cycles, as long as pods are ready (members wait at Permit for
    each other), then the binding cycles."""
    for _ in range(cycles):
        try:
            q = await asyncio.wait_for(w.s.queue.pop(), 0.05)
        except TimeoutError:
            break
        assert q is not None
        w.s.schedule_one(q)
        await asyncio.sleep(0)
    await w.run(0)


# ---- the count ------------------------------------------------------------------------------


def manager_with(*slices: Any, claims: tuple[ResourceClaim, ...] = ()) -> DRAManager:
    m = DRAManager()
    m.on_class_add(device_class(GPU, GPU))
    for s in slices:
        m.on_slice_add(s)
    for c in claims:
        m.on_claim_add(c)
    return m


def test_a_node_takes_as_many_members_as_copies_of_their_claims_fit_one_after_the_other() -> None:
    p, c = member("g", 0)
    m = manager_with(gpu_slice("n1", 8), gpu_slice("n2", 6), gpu_slice("n3", 3), claims=(c,))
    room = DeviceRoom(lambda: m)
    cap = room.capacity(member_capacity, [PodInfo(p)])
    n1, n2, n3 = (node_info(make_node(n)) for n in ("n1", "n2", "n3"))
    pi = PodInfo(p)
    # cpu and memory alone take 110 members (the pod slots); the devices take 2, 1, 0.
    assert member_capacity(pi, n1) == 110
    assert [cap(pi, n) for n in (n1, n2, n3)] == [2, 1, 0]
    assert room.count(pi, n3, 110).reason == MSG_CANNOT_ALLOCATE


def test_devices_allocated_or_in_flight_are_not_free() -> None:
    p, c = member("g", 0)
    other = claim(
        "other",
        req("gpu", GPU, 2),
        ns="default",
        status={
            "allocation": {
                "devices": {"results": results(("gpu", GPU, "n1", "gpu-0"), ("gpu", GPU, "n1", "gpu-1"))},
                "nodeSelector": local_node_selector("n1"),
            }
        },
    )
    m = manager_with(gpu_slice("n1", 8), claims=(c, other))
    room = DeviceRoom(lambda: m)
    pi, n1 = PodInfo(p), node_info(make_node("n1"))
    assert room.count(pi, n1, 110).copies == 1  # 6 free GPUs: one copy of 4
    m.on_claim_delete(other)
    assert room.count(pi, n1, 110).copies == 2  # the allocation went: 8 free
    flight = claim(
        "flight",
        req("gpu", GPU, 1),
        ns="default",
        status={
            "allocation": {
                "devices": {"results": results(("gpu", GPU, "n1", "gpu-7"))},
                "nodeSelector": local_node_selector("n1"),
            }
        },
    )
    m.signal_claim_pending_allocation("uid-flight", flight)
    assert room.count(pi, n1, 110).copies == 1  # Reserve'd elsewhere, not written yet


def test_network_attached_devices_do_not_cap_the_node() -> None:
    p, c = member("g", 0)
    shared = slice_("fabric", "fabric", GPU, *(device(f"gpu-{i}") for i in range(4)), all_nodes=True)
    m = manager_with(shared, claims=(c,))
    pi, n1 = PodInfo(p), node_info(make_node("n1"))
    # Every node sees the same four GPUs: a per-node count would promise them on each node.
    got = DeviceRoom(lambda: m).count(pi, n1, 7)
    assert (got.copies, got.counted) == (7, False)


def test_the_device_feed_names_the_node_of_a_slice_or_a_local_allocation() -> None:
    m = manager_with()
    start = m.device_cursor()
    m.on_slice_add(gpu_slice("n1", 4))
    assert m.device_changes(start)[1] == {"n1"}
    cur = m.device_cursor()
    m.on_slice_add(slice_("fabric", "fabric", GPU, "x", all_nodes=True))
    assert m.device_changes(cur)[1] is None  # a network-attached slice may reach any node


def test_hints_wake_members_with_claims_on_slices_and_released_allocations() -> None:
    p, c = member("g", 0)
    plain = pod("plain")
    s = gpu_slice("n1", 4)
    assert is_schedulable_after_slice_change(p, None, s) == QueueingHint.QUEUE
    assert is_schedulable_after_slice_change(plain, None, s) == QueueingHint.QUEUE_SKIP
    done = claim(
        "done",
        req("gpu", GPU, 1),
        ns="other",
        status={"allocation": {"devices": {"results": results(("gpu", GPU, "n1", "gpu-0"))}}},
    )
    assert is_schedulable_after_claim_change(p, done, None) == QueueingHint.QUEUE
    assert is_schedulable_after_claim_change(p, None, done) == QueueingHint.QUEUE_SKIP
    assert is_schedulable_after_claim_change(plain, done, None) == QueueingHint.QUEUE_SKIP


# ---- the gang, end to end in memory -----------------------------------------------------------


def test_the_gang_goes_to_the_clique_whose_devices_take_all_four_members() -> None:
    async def go() -> None:
        # Clique a has the least room by cpu (3 nodes) but GPUs for 3 members only; b takes 4.
        w = cluster({"a": [4, 4, 4], "b": [4, 4, 4, 4]})
        add_gang(w, "g", 4)
        await drain(w, 8)
        assert sorted(w.binder.bound) == ["g-0", "g-1", "g-2", "g-3"]
        assert {n[0] for n in w.binder.bound.values()} == {"b"}
        devices = [d for ds in allocated(w).values() for d in ds]
        assert len(devices) == 16 and len(set(devices)) == 16

    asyncio.run(go())


def test_a_node_with_eight_gpus_counts_two_members() -> None:
    async def go() -> None:
        # One 8-GPU node in a takes two members (their picks one after the other), so a has
        # room 3 and b (four 4-GPU nodes) is the only fit.
        w = cluster({"a": [8, 4], "b": [4, 4, 4, 4]})
        add_gang(w, "g", 4)
        await drain(w, 8)
        assert {n[0] for n in w.binder.bound.values()} == {"b"} and len(w.binder.bound) == 4

    asyncio.run(go())


def test_no_clique_fits_nothing_is_allocated_or_bound() -> None:
    async def go() -> None:
        w = cluster({"a": [4, 4, 4], "b": [8, 0]})
        add_gang(w, "g", 4)
        await drain(w, 8)
        assert w.binder.bound == {}
        assert allocated(w) == {}
        fails = w.recorder.failures("g-0")
        assert fails and "no domain has room for gang default/g" in fails[-1]

    asyncio.run(go())


def test_a_new_slice_in_a_clique_adds_device_room() -> None:
    async def go() -> None:
        w = cluster({"a": [4, 4, 4, 4]}, unsliced=("a4",))
        pods = add_gang(w, "g", 4)
        await drain(w, 8)
        assert w.binder.bound == {}
        q = w.s.queue
        parked = len(q.unschedulable)
        w.add_slice(gpu_slice("a4", 4))  # the room index must recount a4 (no node event)
        assert len(q.unschedulable) < parked  # the slice event woke the gang (OMEGangPack's hint)
        q.activate(pods)  # their backoff, cut short
        await drain(w, 8)
        assert len(w.binder.bound) == 4

    asyncio.run(go())


# ---- explain ----------------------------------------------------------------------------------


def dra_snapshot(cliques: dict[str, list[int]], size: int) -> ClusterSnapshot:
    """A snapshot: nodes with node-local GPU slices by clique, a gang of ``size`` members each
    with its own 4-GPU template claim."""

    ns = "team"
    node_dicts, slices = [], []
    for d, gpus in cliques.items():
        for i, n in enumerate(gpus):
            node_dicts.append(node_manifest(f"{d}-{i}", {CLIQUE: d}))
            slices.append(gpu_slice(f"{d}-{i}", n))
    pods, claims = [], []
    for i in range(size):
        p = pod_manifest(f"g-{i}", ns, gang="g", gpu=0)
        p["metadata"]["uid"] = f"uid-g-{i}"
        p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "g-gpus"}]
        p["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"g-{i}-gpu"}]}
        pods.append(p)
        owner = {"apiVersion": "v1", "kind": "Pod", "name": f"g-{i}", "uid": f"uid-g-{i}", "controller": True}
        claims.append(claim(f"g-{i}-gpu", req("gpu", GPU, 4), ns=ns, meta={"ownerReferences": [owner]}))
    s = snapshot(node_dicts, pods, [pod_group("g", ns, size, topology_key=CLIQUE)], ns)
    snap: ClusterSnapshot = msgspec.structs.replace(
        s, resource_claims=claims, resource_slices=slices, device_classes=[device_class(GPU, GPU)]
    )
    return snap


def test_explain_shows_each_domains_device_room_and_the_shortfall() -> None:

    s = dra_snapshot({"a": [4, 4, 4], "b": [8, 0]}, 4)
    ex = explain(parse_config(chart_config()), s, "podgroup", "team", "g")
    assert isinstance(ex, Explanation)
    a, b = ex.domains
    assert (a.name, a.device_room, a.fits) == ("a", 3, False)
    assert (b.name, b.device_room, b.fits) == ("b", 2, False)
    assert a.why_not() == "device shortfall: free devices take 3 of the 4 members (a-0 1, a-1 1, a-2 1)"
    assert (
        b.why_not()
        == "device shortfall: free devices take 2 of the 4 members (b-0 2, b-1 0); 1 cannot allocate all claims"
    )
    assert ex.decision.result == "unschedulable"
    assert "no domain has room for gang team/g" in ex.decision.message
    text = render_text(ex)
    assert "DEVICE ROOM" in text and "device shortfall" in text
    assert ex.to_json()["domains"][0]["deviceRoom"] == 3


def test_explain_pins_the_clique_whose_devices_take_the_gang() -> None:

    s = dra_snapshot({"a": [4, 4, 4], "b": [4, 4, 4, 4]}, 4)
    ex = explain(parse_config(chart_config()), s, "podgroup", "team", "g")
    assert isinstance(ex, Explanation)
    assert [(d.name, d.device_room, d.fits) for d in ex.domains] == [("a", 3, False), ("b", 4, True)]
    assert (ex.decision.result, ex.decision.domain) == ("pinned", "b")


def test_equal_claim_entries_in_two_namespaces_are_two_shapes() -> None:
    p, c = member("g", 0)
    raw = msgspec.to_builtins(p)
    raw["metadata"]["namespace"] = "other"
    q = msgspec.convert(raw, Pod)
    big = claim("g-0-gpu", req("gpu", GPU, 8), ns="other", meta={"ownerReferences": c.metadata.owner_references})
    m = manager_with(gpu_slice("n1", 8), claims=(c, big))
    room = DeviceRoom(lambda: m)
    n1 = node_info(make_node("n1"))
    assert room.count(PodInfo(p), n1, 110).copies == 2  # 4 GPUs each
    assert room.count(PodInfo(q), n1, 110).copies == 1  # the same entries, but 8 GPUs each
