"""DynamicResources' Reserve, Unreserve and PreBind: in-flight allocations, the claim writes, conflicts."""

from __future__ import annotations

import asyncio

import msgspec

from ome_scheduler.api.resource import FINALIZER
from ome_scheduler.framework.status import Code
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.plugins.dynamicresources import binding
from tests.plugins.test_dynamicresources import GPU, attempt, claim_pod, gpu_claim, gpu_world
from tests.support.dra_env import World

CLAIM = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c"


def test_prebind_adds_the_finalizer_then_writes_allocation_and_reservation_in_one_status_update() -> None:
    async def main() -> None:
        w = gpu_world({"node-1": 4})
        c = w.add_claim(gpu_claim("c", 2))
        p = w.add_pod(claim_pod("p", "c"))
        await w.run(1)
        assert w.binder.bound == {"p": "node-1"}
        patches = [(path, body) for m, path, body in w.api.writes if m == "PATCH"]
        assert patches[0] == (
            CLAIM,
            {
                "metadata": {
                    "uid": c.metadata.uid,
                    "resourceVersion": c.metadata.resource_version,
                    "finalizers": [FINALIZER],
                }
            },
        )
        path, body = patches[1]
        assert path == CLAIM + "/status" and len(patches) == 2
        assert body["metadata"]["uid"] == c.metadata.uid
        assert body["metadata"]["resourceVersion"] != c.metadata.resource_version  # the finalizer's write's
        assert body["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": p.metadata.uid}]
        assert body["status"]["allocation"] == {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": GPU, "pool": "node-1", "device": "gpu-0"},
                    {"request": "gpu", "driver": GPU, "pool": "node-1", "device": "gpu-1"},
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
                ]
            },
        }
        stored = w.api.claim("default", "c")
        assert stored.metadata.finalizers == [FINALIZER] and stored.status.allocation is not None
        assert w.s.dra.list_all_allocated_devices() == {(GPU, "node-1", "gpu-0"), (GPU, "node-1", "gpu-1")}
        assert not w.s.dra.claim_has_pending_allocation(c.metadata.uid)

    asyncio.run(main())


def test_a_pod_with_claims_is_nominated_to_its_node_before_prebind_writes_them() -> None:
    """NominatedNodeNameForExpectation: DynamicResources' PreBindPreFlight has work, so the
    binding cycle patches ``nominatedNodeName`` before PreBind's first claim write; a pod
    without claims (every PreBindPreFlight Skip) is bound without that patch."""

    async def main() -> None:
        w = gpu_world({"node-1": 4})
        w.add_claim(gpu_claim("c", 2))
        w.add_pod(claim_pod("p", "c"))
        await w.run(1)
        assert w.binder.bound == {"p": "node-1"}
        assert w.recorder.nominations == [("p", "node-1", 0)]
        assert any(m == "PATCH" for m, _, _ in w.api.writes)
        w.add_pod(claim_pod("plain"))
        await w.run(1)
        assert "plain" in w.binder.bound
        assert w.recorder.nominations == [("p", "node-1", 0)]

    asyncio.run(main())


def test_a_claim_that_has_the_finalizer_gets_only_the_status_write() -> None:
    async def main() -> None:
        w = gpu_world({"node-1": 1})
        w.add_claim(gpu_claim("c", meta={"finalizers": [FINALIZER]}))
        w.add_pod(claim_pod("p", "c"))
        await w.run(1)
        assert [path for m, path, _ in w.api.writes if m == "PATCH"] == [CLAIM + "/status"]

    asyncio.run(main())


def test_devices_in_flight_are_not_given_to_a_second_pod_and_a_shared_claim_waits() -> None:
    w = gpu_world({"node-1": 1})
    c = w.add_claim(gpu_claim("c"))
    w.add_claim(gpu_claim("d"))
    p = claim_pod("p", "c")
    host, msg, state = attempt(w, p)
    assert host == "node-1", msg
    assert w.plugin.reserve(state, PodInfo(p), host) is None
    assert w.s.dra.claim_has_pending_allocation(c.metadata.uid)
    assert w.s.dra.list_all_allocated_devices() == {(GPU, "node-1", "gpu-0")}
    # Another pod with its own claim: the one GPU is in flight.
    _, msg, _ = attempt(w, claim_pod("q", "d"))
    assert msg == "0/2 nodes are available: 2 cannot allocate all claims. still not schedulable", msg
    # Another pod sharing the claim waits for the write.
    _, msg, _ = attempt(w, claim_pod("r", "c"))
    assert msg.startswith("0/2 nodes are available: resource claim default/c is in the process of being allocated."), (
        msg
    )
    # Unreserve gives the device back.
    w.plugin.unreserve(state, PodInfo(p), host)
    assert not w.s.dra.claim_has_pending_allocation(c.metadata.uid)
    assert w.s.dra.list_all_allocated_devices() == set()
    assert attempt(w, claim_pod("q", "d"))[0] == "node-1"


def test_the_written_claim_counts_before_the_informer_delivers_it() -> None:
    async def main() -> None:
        w = gpu_world({"node-1": 1})
        w.add_claim(gpu_claim("c"))
        w.add_claim(gpu_claim("d"))
        w.api.deliver = False
        w.add_pod(claim_pod("p", "c"))
        await w.run(1)
        assert w.binder.bound == {"p": "node-1"}
        cached = w.s.dra.get_claim("default", "c")
        assert cached is not None and cached.status.allocation is not None  # assumed after the write
        _, msg, _ = attempt(w, claim_pod("q", "d"))
        assert "cannot allocate all claims" in msg
        # The informer's copy of the same version changes nothing.
        w.s.dra.on_claim_update(cached, w.api.claim("default", "c"))
        assert w.s.dra.list_all_allocated_devices() == {(GPU, "node-1", "gpu-0")}

    asyncio.run(main())


def test_a_claim_modified_between_reserve_and_prebind_still_binds() -> None:
    async def main() -> None:
        w = gpu_world({"node-1": 1})
        c = w.add_claim(gpu_claim("c"))
        p = claim_pod("p", "c")
        host, _, state = attempt(w, p)
        assert w.plugin.reserve(state, PodInfo(p), host) is None
        # Someone labels the claim meanwhile: its resourceVersion moves on.
        w.api.put(msgspec.structs.replace(c, metadata=msgspec.structs.replace(c.metadata, labels={"team": "a"})))
        assert await w.plugin.pre_bind(state, PodInfo(p), host) is None
        methods = [(m, path.rsplit("/", 1)[-1]) for m, path, _ in w.api.writes]
        assert methods == [("PATCH", "c"), ("GET", "c"), ("PATCH", "c"), ("PATCH", "status")]
        stored = w.api.claim("default", "c")
        assert stored.metadata.labels == {"team": "a"} and stored.metadata.finalizers == [FINALIZER]
        assert stored.status.allocation is not None and [r.uid for r in stored.status.reserved_for] == [p.metadata.uid]
        assert not w.s.dra.claim_has_pending_allocation(c.metadata.uid)

    asyncio.run(main())


def test_another_writer_winning_fails_prebind_with_upstreams_message() -> None:
    async def main() -> None:
        w = gpu_world({"node-1": 2})
        c = w.add_claim(gpu_claim("c"))
        p = claim_pod("p", "c")
        host, _, state = attempt(w, p)
        assert w.plugin.reserve(state, PodInfo(p), host) is None
        alloc = {"devices": {"results": [{"request": "gpu", "driver": GPU, "pool": "node-1", "device": "gpu-1"}]}}
        raw = msgspec.to_builtins(c) | {"status": {"allocation": alloc}}
        won = msgspec.convert(raw, type(c))
        w.api.put(won)
        st = await w.plugin.pre_bind(state, PodInfo(p), host)
        assert st is not None and st.code == Code.ERROR
        assert st.message() == "claim default/c got allocated elsewhere in the meantime"
        assert w.s.metrics.dra_allocation_conflicts.labels("claim")._value.get() == 1
        assert not w.s.dra.claim_has_pending_allocation(c.metadata.uid)
        w.plugin.unreserve(state, PodInfo(p), host)
        assert w.s.dra.list_all_allocated_devices() == {(GPU, "node-1", "gpu-1")}

    asyncio.run(main())


def test_a_device_another_scheduler_allocated_meanwhile_is_not_written_and_is_counted() -> None:
    """Just before the status write, a device of the allocation is held by another claim (the
    default scheduler allocated it from the same pool): nothing is written, the attempt fails
    with an error naming the device, and the conflict is counted."""

    async def main() -> None:
        w = gpu_world({"node-1": 1})
        c = w.add_claim(gpu_claim("c"))
        p = claim_pod("p", "c")
        host, _, state = attempt(w, p)
        assert w.plugin.reserve(state, PodInfo(p), host) is None
        alloc = {"devices": {"results": [{"request": "gpu", "driver": GPU, "pool": "node-1", "device": "gpu-0"}]}}
        other = msgspec.convert(msgspec.to_builtins(gpu_claim("theirs")) | {"status": {"allocation": alloc}}, type(c))
        w.add_claim(other)
        writes = len(w.api.writes)
        st = await w.plugin.pre_bind(state, PodInfo(p), host)
        assert st is not None and st.code == Code.ERROR
        assert (
            st.message() == f"claim default/c: device {GPU}/node-1/gpu-0 got allocated to another claim in the meantime"
        )
        assert len(w.api.writes) == writes
        assert w.api.claim("default", "c").status.allocation is None
        m = w.s.metrics.dra_allocation_conflicts
        assert m.labels("device")._value.get() == 1 and m.labels("claim")._value.get() == 0
        w.plugin.unreserve(state, PodInfo(p), host)
        assert not w.s.dra.claim_has_pending_allocation(c.metadata.uid)

    asyncio.run(main())


def test_a_claim_deleted_meanwhile_and_a_lasting_conflict() -> None:
    async def main() -> None:
        w = gpu_world({"node-1": 1})
        c = w.add_claim(gpu_claim("c"))
        p = claim_pod("p", "c")
        host, _, state = attempt(w, p)
        w.plugin.reserve(state, PodInfo(p), host)
        w.api.put(
            msgspec.structs.replace(
                c, metadata=msgspec.structs.replace(c.metadata, deletion_timestamp="2026-01-01T00:00:00Z")
            )
        )
        st = await w.plugin.pre_bind(state, PodInfo(p), host)
        assert st is not None and st.message() == "claim default/c got deleted in the meantime"

        w2 = gpu_world({"node-1": 1})
        c2 = w2.add_claim(gpu_claim("c", meta={"finalizers": [FINALIZER]}))

        def bump(path: str, body: object) -> None:  # another writer, before every write of ours
            cur = w2.api.claim("default", "c")
            w2.api.put(
                msgspec.structs.replace(
                    cur, metadata=msgspec.structs.replace(cur.metadata, labels={"n": str(w2.api.rv)})
                )
            )

        w2.api.before_write = bump
        host, _, state = attempt(w2, p)
        w2.plugin.reserve(state, PodInfo(p), host)
        st = await w2.plugin.pre_bind(state, PodInfo(p), host)
        assert st is not None and st.code == Code.ERROR
        assert st.message().startswith("add allocation and reservation to claim default/c: 409 Conflict: ")
        assert sum(1 for m, _, _ in w2.api.writes if m == "PATCH") == binding.RETRY_STEPS
        assert c2.metadata.uid

    asyncio.run(main())


def test_unreserve_after_a_reservation_releases_it() -> None:
    async def main() -> None:
        w = gpu_world({"node-1": 1})
        w.add_claim(gpu_claim("c"))
        p = claim_pod("p", "c")
        host, _, state = attempt(w, p)
        w.plugin.reserve(state, PodInfo(p), host)
        assert await w.plugin.pre_bind(state, PodInfo(p), host) is None
        assert [r.name for r in w.api.claim("default", "c").status.reserved_for] == ["p"]
        # Binding failed after PreBind: Unreserve takes the pod out of reservedFor.
        w.plugin.unreserve(state, PodInfo(p), host)
        await w.plugin.drain()
        m, path, body = w.api.writes[-1]
        assert (m, path) == ("PATCH", CLAIM + "/status")
        assert body["status"] == {"reservedFor": [{"$patch": "delete", "uid": p.metadata.uid}]}
        stored = w.api.claim("default", "c")
        assert stored.status.reserved_for == [] and stored.status.allocation is not None

    asyncio.run(main())


def test_a_claim_already_reserved_for_the_pod_is_not_written_again() -> None:
    async def main() -> None:
        w = World()
        w.add_claim(gpu_claim("c"))
        p = claim_pod("p", "c")
        status = {
            "allocation": {"devices": {"results": []}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": p.metadata.uid}],
        }
        w.add_claim(gpu_claim("c", status=status))
        host, msg, state = attempt(w, p)
        assert host, msg
        assert w.plugin.reserve(state, PodInfo(p), host) is None
        assert await w.plugin.pre_bind(state, PodInfo(p), host) is None
        assert w.api.writes == []

    asyncio.run(main())
