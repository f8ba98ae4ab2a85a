"""DynamicResources on a real scheduler: PreEnqueue, PreFilter, Filter, PostFilter, Score and the
queueing hints, with upstream's messages (``dynamicresources_test.go``'s cases that apply).
Reserve, Unreserve and PreBind are in ``test_dynamicresources_binding.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import pytest

from ome_scheduler.api.core import Pod
from ome_scheduler.api.resource import ResourceClaim
from ome_scheduler.config.errors import ConfigError
from ome_scheduler.config.validation_pluginargs import decode_plugin_args
from ome_scheduler.framework.events import QueueingHint
from ome_scheduler.framework.interface import CycleState
from ome_scheduler.framework.status import Code
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.plugins.dynamicresources.plugin import first_available_score
from tests.dra.objects import claim, device, device_class, first_available, req, req_all, slice_, sub
from tests.support.dra_env import World
from tests.support.plugins_env import pod

GPU = "gpu.nvidia.com"
DRA = " no new claims to deallocate"


def gpu_world(gpus: Mapping[str, int] | None = None, **kw: Any) -> World:
    """node-1 and node-2, with ``gpus`` node-local GPUs each (default 4), class ``gpu.nvidia.com``."""
    w = World(**kw)
    w.add_class(device_class(GPU, GPU))
    for n, count in (gpus or {"node-1": 4, "node-2": 4}).items():
        w.add_slice(slice_(f"{n}-gpus", n, GPU, *(device(f"gpu-{i}", {"index": i}) for i in range(count)), node=n))
    return w


def claim_pod(
    name: str, *claims: str, templates: Mapping[str, str] | None = None, statuses: Sequence[Mapping[str, Any]] = ()
) -> Pod:
    entries: list[dict[str, Any]] = [{"name": c, "resourceClaimName": c} for c in claims]
    entries += [{"name": e, "resourceClaimTemplateName": t} for e, t in (templates or {}).items()]
    p = pod(name, spec={"resourceClaims": entries})
    if statuses:
        p = msgspec.convert(msgspec.to_builtins(p) | {"status": {"resourceClaimStatuses": list(statuses)}}, Pod)
    return p


def gpu_claim(name: str, count: int = 1, **kw: Any) -> ResourceClaim:
    return claim(name, req("gpu", GPU, count), ns="default", **kw)


def attempt(w: World, p: Pod) -> tuple[str, str, CycleState]:
    fw = w.s.frameworks["ome-scheduler"]
    from ome_scheduler.framework.runtime import FitError
    from ome_scheduler.generic_scheduler import NoNodesAvailable

    state = CycleState()
    pi = PodInfo(p)
    try:
        return w.s.cycles.algorithm.schedule_pod(fw, state, pi), "", state
    except FitError as fe:
        fe.diagnosis.post_filter_msg = fw.run_post_filter(state, pi, fe.diagnosis.node_to_status).message()
        return "", str(fe), state
    except NoNodesAvailable as exc:
        return "", str(exc), state


# ---- PreEnqueue ---------------------------------------------------------------------------


def test_pre_enqueue_gates_until_the_claims_exist() -> None:
    w = gpu_world()
    pl = w.plugin
    tmpl = claim_pod("p", templates={"gpu": "gpu-template"})
    st = pl.pre_enqueue(PodInfo(tmpl))
    assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.message() == 'pod "default/p": ResourceClaim not created yet'
    named = claim_pod("q", "c")
    st = pl.pre_enqueue(PodInfo(named))
    assert st is not None and st.message() == 'could not find ResourceClaim "default/c"'
    w.add_claim(gpu_claim("c", meta={"deletionTimestamp": "2026-01-01T00:00:00Z"}))
    st = pl.pre_enqueue(PodInfo(named))
    assert st is not None and st.message() == 'resourceclaim "c" is being deleted'
    # A template's claim must be owned by the pod.
    w.add_claim(gpu_claim("p-gpu"))
    made = claim_pod("p", templates={"gpu": "gpu-template"}, statuses=[{"name": "gpu", "resourceClaimName": "p-gpu"}])
    st = pl.pre_enqueue(PodInfo(made))
    assert st is not None and st.message() == (
        "ResourceClaim default/p-gpu was not created for pod default/p (pod is not owner)"
    )
    owned = gpu_claim(
        "p-gpu", meta={"ownerReferences": [{"kind": "Pod", "name": "p", "uid": made.metadata.uid, "controller": True}]}
    )
    w.add_claim(owned)
    assert pl.pre_enqueue(PodInfo(made)) is None
    # A template entry whose status names no claim needs none.
    none = claim_pod("r", templates={"gpu": "t"}, statuses=[{"name": "gpu"}])
    assert pl.pre_enqueue(PodInfo(none)) is None
    assert pl.pre_enqueue(PodInfo(pod("plain"))) is None


def test_a_gated_pod_enters_the_queue_when_its_claim_is_created() -> None:
    async def main() -> None:
        w = gpu_world()
        w.add_pod(claim_pod("p", "c"))
        assert not w.s.queue.active
        w.add_claim(gpu_claim("c"))
        await w.run(1)
        assert set(w.binder.bound) == {"p"}

    asyncio.run(main())


def test_a_pod_waiting_for_its_template_claim_enters_when_its_status_names_it() -> None:
    async def main() -> None:
        w = gpu_world()
        p = w.add_pod(claim_pod("p", templates={"gpu": "t"}))
        c = gpu_claim(
            "p-gpu", meta={"ownerReferences": [{"kind": "Pod", "name": "p", "uid": p.metadata.uid, "controller": True}]}
        )
        w.add_claim(c)  # the claim exists, the pod's status does not name it yet
        assert not w.s.queue.active
        raw = msgspec.to_builtins(p)
        raw["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu"}]}
        w.s.handlers.on_pod_update(p, msgspec.convert(raw, Pod))
        await w.run(1)
        assert set(w.binder.bound) == {"p"}

    asyncio.run(main())


# ---- PreFilter and Filter -----------------------------------------------------------------


def test_pod_without_claims_keeps_the_no_new_claims_sentence() -> None:
    w = gpu_world()
    host, msg, _ = attempt(w, pod("big", requests={"cpu": "100"}))
    assert not host and msg.endswith("Insufficient cpu." + DRA), msg


def test_missing_class_and_unknown_request_type() -> None:
    w = gpu_world()
    w.add_claim(claim("c", req("gpu", "no-such-class"), ns="default"))
    _, msg, _ = attempt(w, claim_pod("p", "c"))
    assert msg == "0/2 nodes are available: request gpu: device class no-such-class does not exist." + DRA, msg
    w.add_claim(claim("d", first_available("gpu", sub("big", GPU), sub("small", "gone")), ns="default"))
    _, msg, _ = attempt(w, claim_pod("q", "d"))
    assert "request gpu/small: device class gone does not exist" in msg
    w.add_claim(claim("e", {"name": "gpu"}, ns="default"))
    _, msg, _ = attempt(w, claim_pod("r", "e"))
    assert "resource claim default/e, request gpu: unknown request type" in msg


def test_devices_only_on_one_node_put_the_pod_there() -> None:
    w = gpu_world({"node-2": 4})
    w.add_claim(gpu_claim("c", 4))
    host, msg, state = attempt(w, claim_pod("p", "c"))
    assert host == "node-2", msg
    s = state.read("DynamicResources")
    alloc = s.node_allocations["node-2"][0]
    assert [r.device for r in alloc.devices.results] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert msgspec.to_builtins(alloc.node_selector) == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-2"]}]}]
    }


def test_exhaustion_cannot_allocate_all_claims() -> None:
    async def main() -> None:
        w = gpu_world({"node-1": 4})
        for name in ("a", "b"):
            w.add_claim(gpu_claim(name, 4))
            w.add_pod(claim_pod(f"p-{name}", name))
        await w.run(2)
        assert w.binder.bound == {"p-a": "node-1"}
        assert w.recorder.failures("p-b") == [
            "0/2 nodes are available: 2 cannot allocate all claims." + " still not schedulable"
        ]

    asyncio.run(main())


def test_a_shared_claim_pins_later_pods_to_its_node() -> None:
    async def main() -> None:
        w = gpu_world()
        w.add_claim(gpu_claim("shared"))
        w.add_pod(claim_pod("first", "shared"))
        await w.run(1)
        node = w.binder.bound["first"]
        assert w.api.claim("default", "shared").status.allocation is not None
        # The chart's profile packs (MostAllocated): fill the other node so the scorers prefer it;
        # the shared claim still pins the second pod to the claim's node.
        other = "node-2" if node == "node-1" else "node-1"
        w.add_pod(pod("busy", requests={"cpu": "30"}, node_name=other))
        assert attempt(w, pod("free", requests={"cpu": "1"}))[0] == other
        w.add_pod(claim_pod("second", "shared"))
        host, msg, _ = attempt(w, w.pod("second"))
        assert host == node, msg
        await w.run(1)
        assert w.binder.bound["second"] == node
        c = w.api.claim("default", "shared")
        assert [r.name for r in c.status.reserved_for] == ["first", "second"]

    asyncio.run(main())


def test_an_allocated_claim_off_every_node_is_deallocated_in_post_filter() -> None:
    async def main() -> None:
        w = gpu_world()
        gone = {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-9"]}]}]
        }
        status = {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": GPU, "pool": "node-9", "device": "gpu-0"}]},
                "nodeSelector": gone,
            }
        }
        w.add_claim(gpu_claim("c", status=status))
        w.add_pod(claim_pod("p", "c"))
        await w.run(1)
        assert w.recorder.failures("p") == [
            "0/2 nodes are available: 2 resourceclaim not available on the node. deallocation of ResourceClaim completed"
        ]
        patch = [b for m, path, b in w.api.writes if m == "PATCH" and path.endswith("/resourceclaims/c/status")]
        assert patch and patch[0]["status"] == {"allocation": None, "reservedFor": None, "devices": None}
        assert w.api.claim("default", "c").status.allocation is None
        # The deallocation (a claim event) retried the pod: it is allocated anew and bound.
        await w.run(1)
        assert w.binder.bound.get("p") in ("node-1", "node-2")

    asyncio.run(main())


def test_a_claim_reserved_for_another_pod_is_not_deallocated() -> None:
    w = gpu_world()
    gone = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-9"]}]}]}
    status = {
        "allocation": {"devices": {"results": []}, "nodeSelector": gone},
        "reservedFor": [{"resource": "pods", "name": "other", "uid": "other-uid"}],
    }
    w.add_claim(gpu_claim("c", status=status))
    _, msg, _ = attempt(w, claim_pod("p", "c"))
    assert msg == "0/2 nodes are available: 2 resourceclaim not available on the node. still not schedulable"


def test_match_attribute_through_the_plugin() -> None:
    """Four GPUs on one NUMA node: node-1 has two per NUMA node, node-2 four on one."""
    w = World()
    w.add_class(device_class(GPU, GPU))
    w.add_slice(slice_("n1", "node-1", GPU, *(device(f"g{i}", {"numa": i // 2}) for i in range(4)), node="node-1"))
    w.add_slice(slice_("n2", "node-2", GPU, *(device(f"g{i}", {"numa": 0}) for i in range(4)), node="node-2"))
    w.add_claim(claim("c", req("gpu", GPU, 4), ns="default", constraints=[{"matchAttribute": f"{GPU}/numa"}]))
    host, msg, _ = attempt(w, claim_pod("p", "c"))
    assert host == "node-2", msg


def test_all_devices_of_an_incomplete_pool_is_an_error() -> None:
    w = World()
    w.add_class(device_class(GPU, GPU))
    w.add_slice(slice_("n1", "node-1", GPU, "gpu-0", node="node-1", count=2))
    w.add_claim(claim("c", req_all("gpu", GPU), ns="default"))
    fw = w.s.frameworks["ome-scheduler"]
    state, pi = CycleState(), PodInfo(claim_pod("p", "c"))
    _, st, _ = fw.run_pre_filter(state, pi, w.s.node_infos())
    assert st is None or st.is_success()
    st = w.plugin.filter(state, pi, w.s.cache.get_node_info("node-1"))  # type: ignore[arg-type]
    assert st is not None and st.code == Code.ERROR
    assert st.message() == (
        "claim default/c, request gpu: asks for all devices, but resource pool gpu.nvidia.com/node-1 is currently being updated"
    )


def test_first_available_prefers_the_first_alternative() -> None:
    w = World()
    w.add_class(device_class("big", GPU, selectors=[f'device.attributes["{GPU}"].memory >= 80']))
    w.add_class(device_class("small", GPU))
    w.add_slice(slice_("n1", "node-1", GPU, device("g0", {"memory": 40}), node="node-1"))
    w.add_slice(slice_("n2", "node-2", GPU, device("g0", {"memory": 80}), node="node-2"))
    w.add_claim(claim("c", first_available("gpu", sub("big", "big"), sub("small", "small")), ns="default"))
    host, msg, state = attempt(w, claim_pod("p", "c"))
    assert host == "node-2", msg
    s = state.read("DynamicResources")
    claims = [s.claims[i] for i in s.to_allocate]
    assert first_available_score(claims, s.node_allocations["node-2"]) == 8
    assert first_available_score(claims, s.node_allocations["node-1"]) == 7
    scores = w.plugin.score(state, PodInfo(claim_pod("p", "c")), w.s.node_infos())
    w.plugin.normalize_score(state, PodInfo(claim_pod("p", "c")), scores)
    by_node = dict(zip([n.name for n in w.s.node_infos()], scores, strict=True))
    assert by_node == {"node-1": 87, "node-2": 100}


def test_score_of_upstreams_table() -> None:
    """``TestComputeScore``'s cases: the top subrequest scores 8, the last 1."""
    cls = "c"
    eight = [sub(f"subreq-{i}", cls) for i in range(1, 9)]
    from ome_scheduler.api.resource import AllocationResult

    def alloc(*requests: str) -> AllocationResult:
        return msgspec.convert({"devices": {"results": [{"request": r} for r in requests]}}, AllocationResult)

    two = claim("x", first_available("req-1", *eight), first_available("req-2", sub("subreq-1", cls)))
    assert first_available_score([two], [alloc("req-1/subreq-8", "req-2/subreq-1")]) == 9
    a, b = claim("a", first_available("req-1", *eight)), claim("b", first_available("req-2", *eight))
    assert first_available_score([a, b], [alloc("req-1/subreq-8"), alloc("req-2/subreq-8")]) == 2
    a1, b1 = (
        claim("a", first_available("req-1", sub("subreq-1", cls))),
        claim("b", first_available("req-2", sub("subreq-1", cls))),
    )
    assert first_available_score([a1, b1], [alloc("req-1/subreq-1"), alloc("req-2/subreq-1")]) == 16
    assert first_available_score([claim("e", req("r", cls))], [alloc("r")]) == 0


# ---- hostile input ------------------------------------------------------------------------


def test_a_selector_that_errors_is_an_error_status() -> None:
    w = gpu_world()
    w.add_claim(claim("c", req("gpu", GPU, selectors=['device.attributes["x"].nope == 1']), ns="default"))
    fw = w.s.frameworks["ome-scheduler"]
    state, pi = CycleState(), PodInfo(claim_pod("p", "c"))
    fw.run_pre_filter(state, pi, w.s.node_infos())
    st = w.plugin.filter(state, pi, w.s.cache.get_node_info("node-1"))  # type: ignore[arg-type]
    assert st is not None and st.code == Code.ERROR
    assert st.message() == "claim default/c: selector #0: CEL runtime error: no such key: nope"


def test_thousands_of_devices_and_a_hopeless_claim_time_out_per_node() -> None:
    cfg = {
        "profiles": [
            {
                "schedulerName": "ome-scheduler",
                "pluginConfig": [{"name": "DynamicResources", "args": {"filterTimeout": "20ms"}}],
            }
        ]
    }
    from tests.support.plugins_env import chart_config

    config = chart_config()
    config["profiles"][0].setdefault("pluginConfig", []).append(cfg["profiles"][0]["pluginConfig"][0])
    w = World(config=config)
    w.add_class(device_class(GPU, GPU))
    for k in range(40):
        w.add_slice(
            slice_(
                f"s{k}",
                f"p{k}",
                GPU,
                *(device(f"g{i}", {"clique": f"{k}-{i % 2}", "index": i}) for i in range(128)),
                all_nodes=True,
            )
        )
    w.add_claim(
        claim(
            "c",
            req("gpu", GPU, 9, selectors=[f'device.attributes["{GPU}"].index < 16']),
            ns="default",
            constraints=[{"matchAttribute": f"{GPU}/clique"}],
        )
    )
    import time

    start = time.monotonic()
    _, msg, _ = attempt(w, claim_pod("p", "c"))
    assert msg == "0/2 nodes are available: 2 timed out trying to allocate devices. still not schedulable", msg
    assert time.monotonic() - start < 5.0


def test_128_requests_are_an_error_status() -> None:
    w = gpu_world()
    w.add_claim(claim("c", *(req(f"r{i}", GPU) for i in range(128)), ns="default"))
    fw = w.s.frameworks["ome-scheduler"]
    state, pi = CycleState(), PodInfo(claim_pod("p", "c"))
    fw.run_pre_filter(state, pi, w.s.node_infos())
    st = w.plugin.filter(state, pi, w.s.cache.get_node_info("node-1"))  # type: ignore[arg-type]
    assert st is not None and st.code == Code.ERROR
    assert st.message() == "claim default/c: number of requested devices 128 exceeds the claim limit of 32"


# ---- queueing hints -----------------------------------------------------------------------


def test_claim_change_hint() -> None:
    w = gpu_world()
    pl = w.plugin
    c = w.add_claim(gpu_claim("c"))
    p = claim_pod("p", "c")
    hint = pl.is_schedulable_after_claim_change
    assert hint(p, None, c) == QueueingHint.QUEUE  # the pod's claim got created
    other = w.add_claim(gpu_claim("other"))
    assert hint(p, None, other) == QueueingHint.QUEUE_SKIP  # unrelated
    labelled = msgspec.structs.replace(c, metadata=msgspec.structs.replace(c.metadata, labels={"a": "b"}))
    assert hint(p, c, labelled) == QueueingHint.QUEUE_SKIP  # status unchanged
    alloc = msgspec.convert(
        {"devices": {"results": [{"request": "gpu", "driver": GPU, "pool": "node-1", "device": "gpu-0"}]}}, dict
    )
    allocated = msgspec.convert(msgspec.to_builtins(other) | {"status": {"allocation": alloc}}, ResourceClaim)
    assert hint(p, allocated, other) == QueueingHint.QUEUE  # deallocated: devices came free
    with_status = msgspec.convert(msgspec.to_builtins(c) | {"status": {"allocation": alloc}}, ResourceClaim)
    assert hint(p, c, with_status) == QueueingHint.QUEUE
    assert hint(claim_pod("q", "missing"), None, c) == QueueingHint.QUEUE_SKIP  # still not schedulable


def test_pod_change_hint() -> None:
    w = gpu_world()
    pl = w.plugin
    p = claim_pod("p", templates={"gpu": "t"})
    w.add_claim(
        gpu_claim(
            "p-gpu", meta={"ownerReferences": [{"kind": "Pod", "name": "p", "uid": p.metadata.uid, "controller": True}]}
        )
    )
    raw = msgspec.to_builtins(p)
    raw["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu"}]}
    named = msgspec.convert(raw, Pod)
    assert pl.is_schedulable_after_pod_change(p, p, named) == QueueingHint.QUEUE
    assert pl.is_schedulable_after_pod_change(p, p, p) == QueueingHint.QUEUE_SKIP
    assert pl.is_schedulable_after_pod_change(pod("other"), p, named) == QueueingHint.QUEUE_SKIP


def test_events_to_register() -> None:
    from ome_scheduler.framework.events import ActionType as A

    pl = gpu_world().plugin
    got = [(e.event.resource, e.event.action, e.hint is not None) for e in pl.events_to_register()]
    assert got == [
        ("Node", A.ADD | A.UPDATE_NODE_LABEL | A.UPDATE_NODE_ALLOCATABLE, False),
        ("resource.k8s.io/ResourceClaim", A.ADD | A.UPDATE, True),
        ("Pod", A.UPDATE_POD_GENERATED_RESOURCE_CLAIM, True),
        ("resource.k8s.io/DeviceClass", A.ADD | A.UPDATE, False),
        ("resource.k8s.io/ResourceSlice", A.ADD | A.UPDATE, False),
    ]


# ---- arguments ------------------------------------------------------------------------------


def test_arguments() -> None:
    assert decode_plugin_args("DynamicResources", None).filter_timeout_seconds() == 10.0  # type: ignore[union-attr]
    assert decode_plugin_args("DynamicResources", {"filterTimeout": "0s"}).filter_timeout_seconds() == 0.0  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match='^filterTimeout: Invalid value: "-1s": must be zero or positive$'):
        decode_plugin_args("DynamicResources", {"filterTimeout": "-1s"})
    with pytest.raises(
        ConfigError,
        match="^bindingTimeout: Forbidden: DRADeviceBindingConditions or DRAResourceClaimDeviceStatus feature gate is disabled$",
    ):
        decode_plugin_args("DynamicResources", {"bindingTimeout": "10m"})
