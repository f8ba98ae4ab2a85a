"""The structured allocator (``ome_scheduler/dra/allocator.py``): upstream's table tests that apply
with 1.35's default gates (``structured/internal/allocatortesting/allocator_testing.go``,
same names), plus the bound: hostile selectors, too many requests, thousands of devices."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from ome_scheduler.api.resource import DeviceClass, ResourceClaim, ResourceSlice
from ome_scheduler.dra.allocator import (
    AllocationError,
    AllocationTimedOut,
    Allocator,
    DeviceID,
    NodeAllocationFailed,
    Selector,
    SelectorCache,
)
from ome_scheduler.dra.cel import CELCompileError, CELRuntimeError, DeviceView
from tests.dra.objects import (
    CLASS_A,
    CLASS_B,
    DRIVER_A,
    DRIVER_B,
    claim,
    device,
    device_class,
    first_available,
    local_node_selector,
    req,
    req_all,
    results,
    slice_,
    sub,
)

NODE1, NODE2 = "node-1", "node-2"
LABELS = {NODE1: {"region": "region-1", "planet": "earth"}, NODE2: {"region": "region-2"}}
CLASSES = [device_class(CLASS_A, DRIVER_A), device_class(CLASS_B, DRIVER_B)]


def allocate(
    claims: Sequence[ResourceClaim],
    slices: Sequence[ResourceSlice],
    *,
    classes: Sequence[DeviceClass] = CLASSES,
    allocated: set[DeviceID] | None = None,
    node: str = NODE1,
    **kw: Any,
) -> list[dict[str, Any]] | None:
    by_name = {c.metadata.name: c for c in classes}
    a = Allocator(claims, allocated or set(), by_name.get, slices, **kw)
    out = a.allocate(node, LABELS.get(node, {}))
    return None if out is None else [msgspec.to_builtins(r) for r in out]


def devices_of(out: list[dict[str, Any]] | None) -> list[list[dict[str, Any]]]:
    assert out is not None
    return [r["devices"]["results"] for r in out]


def one(node: str = NODE1, *devs: dict[str, Any] | str, pool: str = "pool-1", driver: str = DRIVER_A) -> ResourceSlice:
    return slice_("slice-1", pool, driver, *(devs or ("device-1",)), node=node)


# ---- upstream's table ---------------------------------------------------------------------


def test_simple() -> None:
    out = allocate([claim("claim-0", req("req-0", CLASS_A))], [one()])
    assert out == [
        {
            "devices": {"results": results(("req-0", DRIVER_A, "pool-1", "device-1"))},
            "nodeSelector": local_node_selector(NODE1),
        }
    ]


def test_empty_and_no_claims() -> None:
    assert allocate([], []) == []
    assert allocate([], [one()]) == []


def test_other_node() -> None:
    slices = [one(NODE1, driver=DRIVER_B), slice_("slice-2", "pool-2", DRIVER_A, "device-1", node=NODE2)]
    out = allocate([claim("claim-0", req("req-0", CLASS_A))], slices, node=NODE2)
    assert out is not None and out[0]["nodeSelector"] == local_node_selector(NODE2)
    assert devices_of(out) == [results(("req-0", DRIVER_A, "pool-2", "device-1"))]


SMALL = 'device.attributes["driver-a"].memory >= 1'
LARGE = 'device.attributes["driver-a"].memory >= 2'


def test_small_and_large_backtrack_requests() -> None:
    """The large device, listed first, goes to the small request; the large one then fails and
    the first decision is undone."""
    c = claim("claim-0", req("req-0", CLASS_A, selectors=[SMALL]), req("req-1", CLASS_A, selectors=[LARGE]))
    s = one(NODE1, device("device-2", {"memory": 2}), device("device-1", {"memory": 1}))
    assert devices_of(allocate([c], [s])) == [
        results(("req-0", DRIVER_A, "pool-1", "device-1"), ("req-1", DRIVER_A, "pool-1", "device-2"))
    ]


def test_small_and_large_backtrack_claims() -> None:
    c0 = claim("claim-0", req("req-0", CLASS_A, selectors=[SMALL]))
    c1 = claim("claim-1", req("req-1", CLASS_A, selectors=[LARGE]))
    s = one(NODE1, device("device-2", {"memory": 2}), device("device-1", {"memory": 1}))
    assert devices_of(allocate([c0, c1], [s])) == [
        results(("req-0", DRIVER_A, "pool-1", "device-1")),
        results(("req-1", DRIVER_A, "pool-1", "device-2")),
    ]


def test_devices_split_across_different_slices() -> None:
    slices = [one(pool="pool-1"), slice_("slice-2", "pool-2", DRIVER_A, "device-1", node=NODE1)]
    assert devices_of(allocate([claim("claim-0", req("req-0", CLASS_A, 2))], slices)) == [
        results(("req-0", DRIVER_A, "pool-1", "device-1"), ("req-0", DRIVER_A, "pool-2", "device-1"))
    ]


def test_obsolete_slice() -> None:
    """A pool of two slices whose second is of a newer generation: the older one is obsolete and
    the newer generation is incomplete, so nothing is allocated (and it is no error)."""
    slices = [
        slice_("slice-1-obsolete", "pool-1", DRIVER_A, "device-1", node=NODE1, count=2),
        slice_("slice-1-obsolete", "pool-1", DRIVER_A, "device-2", node=NODE1, count=2, generation=2),
    ]
    assert allocate([claim("claim-0", req("req-0", CLASS_A))], slices) is None


def test_duplicate_slice_is_an_invalid_pool_on_this_node_only() -> None:
    slices = [
        slice_("slice-1", "pool-1", DRIVER_A, "device-1", node=NODE1, count=2),
        slice_("slice-1-2", "pool-1", DRIVER_A, "device-1", node=NODE1, count=2),
    ]
    with pytest.raises(NodeAllocationFailed, match="^invalid resource pools were encountered$"):
        allocate([claim("claim-0", req("req-0", CLASS_A))], slices)


def test_no_slices_and_not_enough_devices() -> None:
    assert allocate([claim("claim-0", req("req-0", CLASS_A))], []) is None
    two = [claim("claim-0", req("req-0", CLASS_A)), claim("claim-0", req("req-1", CLASS_A))]
    assert allocate(two, [one()]) is None


def test_missing_classes() -> None:
    with pytest.raises(AllocationError, match="could not retrieve device class class-a"):
        allocate([claim("claim-0", req("req-0", CLASS_A))], [one()], classes=[])
    with pytest.raises(AllocationError, match="could not retrieve device class unknown-class"):
        allocate([claim("claim-0", req("req-0", "unknown-class"))], [one()])
    with pytest.raises(
        AllocationError,
        match=r"^claim claim-0, request req-0: missing device class name \(unsupported request type\?\)$",
    ):
        allocate([claim("claim-0", req("req-0", ""))], [one()])


def test_all_devices() -> None:
    assert devices_of(allocate([claim("claim-0", req_all("req-0", CLASS_A))], [one()])) == [
        results(("req-0", DRIVER_A, "pool-1", "device-1"))
    ]
    many = [one(pool="pool-1"), one(pool="pool-2")]
    assert devices_of(allocate([claim("claim-0", req_all("req-0", CLASS_A))], many)) == [
        results(("req-0", DRIVER_A, "pool-1", "device-1"), ("req-0", DRIVER_A, "pool-2", "device-1"))
    ]


def test_all_devices_of_the_incomplete_pool_is_an_error() -> None:
    s = slice_("slice-1", "pool-1", DRIVER_A, "device-1", node=NODE1, count=2)
    with pytest.raises(AllocationError) as err:
        allocate([claim("claim-0", req_all("req-0", CLASS_A))], [s])
    assert str(err.value) == (
        "claim claim-0, request req-0: asks for all devices, but resource pool driver-a/pool-1 is currently being updated"
    )
    assert not isinstance(err.value, NodeAllocationFailed)
    # ExactCount merely finds nothing in an incomplete pool.
    assert allocate([claim("claim-0", req("req-0", CLASS_A))], [s]) is None


def test_all_devices_plus_another_either_order() -> None:
    all_a = claim("claim-0", req_all("req-0", CLASS_A))
    one_b = claim("claim-1", req("req-0", CLASS_B))
    slices = [one(pool="pool-1"), one(pool="pool-1", driver=DRIVER_B)]
    expect = [results(("req-0", DRIVER_A, "pool-1", "device-1")), results(("req-0", DRIVER_B, "pool-1", "device-1"))]
    assert devices_of(allocate([all_a, one_b], slices)) == expect
    assert devices_of(allocate([one_b, all_a], slices)) == expect[::-1]


def test_all_devices_no_solution_and_some_allocated() -> None:
    """Both claims want the one device of driver A: the All request cannot have it."""
    all_a = claim("claim-0", req_all("req-0", CLASS_A))
    one_a = claim("claim-1", req("req-0", CLASS_A))
    assert allocate([one_a, all_a], [one()]) is None
    assert allocate([all_a, one_a], [one()]) is None
    two = one(NODE1, "device-1", "device-2")
    assert allocate([all_a], [two], allocated={(DRIVER_A, "pool-1", "device-1")}) is None
    empty = slice_("slice-1", "pool-1", DRIVER_A, node=NODE1)
    assert allocate([all_a], [empty]) is None
    assert allocate([all_a], []) is None


def test_admin_access() -> None:
    taken = {(DRIVER_A, "pool-1", "device-1")}
    two = one(NODE1, "device-1", "device-2")
    admin_all = req_all("req-0", CLASS_A)
    admin_all["exactly"]["adminAccess"] = True
    out = allocate([claim("claim-0", admin_all)], [two], allocated=taken)
    assert devices_of(out) == [
        [
            r | {"adminAccess": True}
            for r in results(("req-0", DRIVER_A, "pool-1", "device-1"), ("req-0", DRIVER_A, "pool-1", "device-2"))
        ]
    ]
    out = allocate([claim("claim-0", req("req-0", CLASS_A, 2, admin=True))], [two], allocated=taken)
    assert [d["device"] for d in devices_of(out)[0]] == ["device-1", "device-2"]
    # Separate claims may share a device with admin access...
    out = allocate(
        [claim("claim-0", req("req-0", CLASS_A, admin=True)), claim("claim-1", req("req-0", CLASS_A, admin=True))],
        [two],
    )
    assert [d[0]["device"] for d in devices_of(out)] == ["device-1", "device-1"]
    # ...and take one another claim is being given.
    out = allocate(
        [claim("claim-0", req("req-0", CLASS_A)), claim("claim-1", req("req-0", CLASS_A, admin=True))], [two]
    )
    assert [(d[0]["device"], d[0].get("adminAccess")) for d in devices_of(out)] == [
        ("device-1", None),
        ("device-1", True),
    ]
    # Within one claim, an admin All request cannot have the device its first request took.
    admin_all["name"] = "req-1"
    c = claim("claim-0", req("req-0", CLASS_A, admin=True), admin_all)
    assert allocate([c], [two]) is None


def test_network_attached_devices() -> None:
    by_region = slice_("slice-1", "pool-1", DRIVER_A, "device-1", selector={"region": "region-1"})
    out = allocate([claim("claim-0", req("req-0", CLASS_A))], [by_region])
    assert out is not None and out[0]["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["region-1"]}]}]
    }
    assert allocate([claim("claim-0", req("req-0", CLASS_A))], [by_region], node=NODE2) is None


def test_many_network_attached_devices_union_their_selectors() -> None:
    slices = [
        slice_("slice-1", "pool-1", DRIVER_A, "device-1", selector={"region": "region-1"}),
        slice_("slice-1", "pool-2", DRIVER_A, "device-1", all_nodes=True),
        slice_("slice-1", "pool-3", DRIVER_A, "device-1", selector={"planet": "earth"}),
        slice_("slice-1", "pool-4", DRIVER_A, "device-1", nodeSelector=local_node_selector(NODE1)),
    ]
    out = allocate([claim("claim-0", req("req-0", CLASS_A, 4))], slices)
    assert out is not None
    assert out[0]["nodeSelector"] == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "region", "operator": "In", "values": ["region-1"]},
                    {"key": "planet", "operator": "In", "values": ["earth"]},
                ],
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE1]}],
            }
        ]
    }
    assert [d["pool"] for d in devices_of(out)[0]] == ["pool-1", "pool-2", "pool-3", "pool-4"]
    # Devices on every node only: no node selector at all.
    out = allocate([claim("claim-0", req("req-0", CLASS_A))], [slices[1]])
    assert out is not None and "nodeSelector" not in out[0]


def test_local_and_network_attached_devices() -> None:
    slices = [
        slice_("slice-1", "pool-1", DRIVER_A, "device-1", selector={"region": "region-1"}),
        slice_("slice-1", "pool-2", DRIVER_A, "device-1", node=NODE1),
    ]
    out = allocate([claim("claim-0", req("req-0", CLASS_A, 2))], slices)
    assert out is not None and out[0]["nodeSelector"] == local_node_selector(NODE1)


def test_several_different_drivers_and_already_allocated() -> None:
    slices = [one(NODE1, "device-1", "device-2"), one(driver=DRIVER_B)]
    out = allocate([claim("claim-0", req("req-0", CLASS_A)), claim("claim-0", req("req-0", CLASS_B))], slices)
    assert [d[0]["driver"] for d in devices_of(out)] == [DRIVER_A, DRIVER_B]
    taken = {(DRIVER_A, "pool-1", "device-1"), (DRIVER_A, "pool-1", "device-2")}
    assert allocate([claim("claim-0", req("req-0", CLASS_A))], [one()], allocated=taken) is None


def test_four_distinct_devices_of_one_pool() -> None:
    s = one(NODE1, *(f"gpu-{i}" for i in range(6)))
    out = allocate([claim("claim-0", req("gpus", CLASS_A, 4))], [s])
    names = [d["device"] for d in devices_of(out)[0]]
    assert names == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"] and len(set(names)) == 4
    # Six devices, two taken by others: exactly the other four.
    taken = {(DRIVER_A, "pool-1", "gpu-0"), (DRIVER_A, "pool-1", "gpu-3")}
    names = [
        d["device"] for d in devices_of(allocate([claim("claim-0", req("gpus", CLASS_A, 4))], [s], allocated=taken))[0]
    ]
    assert names == ["gpu-1", "gpu-2", "gpu-4", "gpu-5"]
    assert allocate([claim("claim-0", req("gpus", CLASS_A, 5))], [s], allocated=taken) is None


ATTRS = {"driverVersion": "v1.0.0", "numa": 1, "stringAttribute": "stringAttributeValue", "boolAttribute": True}


def test_with_constraint() -> None:
    cons = [{"matchAttribute": f"driver-a/{n}"} for n in ("numa", "driverVersion", "stringAttribute", "boolAttribute")]
    c = claim("claim-0", req("req-0", CLASS_A), req("req-1", CLASS_A), constraints=cons)
    s = one(NODE1, device("device-1", ATTRS), device("device-2", ATTRS))
    assert [d["device"] for d in devices_of(allocate([c], [s]))[0]] == ["device-1", "device-2"]


@pytest.mark.parametrize(
    ("attribute", "other"),
    [("numa", 2), ("stringAttribute", "other"), ("boolAttribute", False), ("driverVersion", "v2.0.0")],
)
def test_with_constraint_not_matching(attribute: str, other: Any) -> None:
    c = claim(
        "claim-0",
        req("req-0", CLASS_A),
        req("req-1", CLASS_A),
        constraints=[{"matchAttribute": f"driver-a/{attribute}"}],
    )
    s = one(NODE1, device("device-1", ATTRS), device("device-2", ATTRS | {attribute: other}))
    assert allocate([c], [s]) is None


def test_with_constraint_non_existent_attribute() -> None:
    c = claim("claim-0", req("req-0", CLASS_A), constraints=[{"matchAttribute": "driver-a/NonExistentAttribute"}])
    assert allocate([c], [one()]) is None


def test_with_constraint_not_matching_all_devices_is_an_error() -> None:
    c = claim("claim-0", req_all("req-0", CLASS_A), constraints=[{"matchAttribute": "driver-a/numa"}])
    s = one(NODE1, device("device-1", {"numa": 1}), device("device-2", {"numa": 2}))
    with pytest.raises(AllocationError) as err:
        allocate([c], [s])
    assert str(err.value) == (
        "claim claim-0, request req-0: cannot add device driver-a/pool-1/device-2 because a claim constraint would "
        "not be satisfied"
    )


def test_with_constraint_for_request_and_retry() -> None:
    v = "driver-a/driverVersion"
    c = claim(
        "claim-0",
        req("req-0", CLASS_A),
        req("req-1", CLASS_A),
        constraints=[{"requests": ["req-0"], "matchAttribute": v}],
    )
    s = one(NODE1, device("device-1", {"driverVersion": "v1.0.0"}), device("device-2", {"driverVersion": "v2.0.0"}))
    assert [d["device"] for d in devices_of(allocate([c], [s]))[0]] == ["device-1", "device-2"]
    c = claim(
        "claim-0",
        req("req-0", CLASS_A),
        req("req-1", CLASS_A),
        constraints=[{"requests": ["req-0"], "matchAttribute": v}, {"matchAttribute": "driver-a/stringAttribute"}],
    )
    s = one(
        NODE1,
        device("device-1", {"driverVersion": "v1.0.0", "stringAttribute": "a"}),
        device("device-2", {"driverVersion": "v2.0.0", "stringAttribute": "b"}),
        device("device-3", {"driverVersion": "v3.0.0", "stringAttribute": "b"}),
    )
    assert [d["device"] for d in devices_of(allocate([c], [s]))[0]] == ["device-2", "device-3"]


def test_match_attribute_picks_devices_sharing_a_value_across_slices() -> None:
    """Eight GPUs on one NVLink domain out of two half-free domains: backtracking finds them."""
    domain = {f"gpu-{i}": ("a" if i < 8 else "b") for i in range(16)}
    s = one(NODE1, *(device(n, {"clique": d}) for n, d in domain.items()))
    taken = {(DRIVER_A, "pool-1", "gpu-1")}
    c = claim("claim-0", req("gpus", CLASS_A, 8), constraints=[{"matchAttribute": "driver-a/clique"}])
    names = [d["device"] for d in devices_of(allocate([c], [s], allocated=taken))[0]]
    assert names == [f"gpu-{i}" for i in range(8, 16)]


def test_class_and_claim_config() -> None:
    classes = [device_class(CLASS_A, DRIVER_A, config={"a": 1}), device_class(CLASS_B, DRIVER_B, config={"b": 2})]
    c = claim(
        "claim-0",
        req("req-0", CLASS_A),
        req("req-1", CLASS_A),
        req("req-2", CLASS_B),
        config=[
            {"requests": ["req-2"], "opaque": {"driver": DRIVER_B, "parameters": {"x": True}}},
            {"opaque": {"driver": DRIVER_A, "parameters": {}}},
        ],
    )
    slices = [one(NODE1, "device-0", "device-1"), slice_("slice-2", "pool-1", DRIVER_B, "device-1", node=NODE1)]
    out = allocate([c], slices, classes=classes)
    assert out is not None
    assert out[0]["devices"]["config"] == [
        {"source": "FromClass", "requests": ["req-0", "req-1"], "opaque": {"driver": DRIVER_A, "parameters": {"a": 1}}},
        {"source": "FromClass", "requests": ["req-2"], "opaque": {"driver": DRIVER_B, "parameters": {"b": 2}}},
        {"source": "FromClaim", "requests": ["req-2"], "opaque": {"driver": DRIVER_B, "parameters": {"x": True}}},
        {"source": "FromClaim", "opaque": {"driver": DRIVER_A, "parameters": {}}},
    ]


def test_unknown_selector_mode_and_constraint() -> None:
    c = claim("claim-0", req("req-0", CLASS_A))
    raw = msgspec.to_builtins(c)
    raw["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{}]
    with pytest.raises(
        AllocationError,
        match=r"^claim claim-0, request req-0, selector #0: CEL expression empty \(unsupported selector type\?\)$",
    ):
        allocate([msgspec.convert(raw, ResourceClaim)], [one()])
    raw = msgspec.to_builtins(c)
    raw["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "future-mode"
    with pytest.raises(AllocationError, match="^claim claim-0, request req-0: unsupported count mode future-mode$"):
        allocate([msgspec.convert(raw, ResourceClaim)], [one()])
    with pytest.raises(
        AllocationError, match=r"^claim claim-0, constraint #0: empty constraint \(unsupported constraint type\?\)$"
    ):
        allocate([claim("claim-0", req("req-0", CLASS_A), constraints=[{}])], [one()])


def test_invalid_cel() -> None:
    with pytest.raises(
        AllocationError, match=r"^claim claim-0: selector #0: CEL compile error: .*undeclared reference"
    ):
        allocate([claim("claim-0", req("req-0", CLASS_A, selectors=["noSuchVar"]))], [one()])
    broken = [device_class(CLASS_A, DRIVER_A, selectors=["noSuchVar"])]
    with pytest.raises(
        AllocationError, match=r"^class class-a: selector #0: CEL compile error: .*undeclared reference"
    ):
        allocate([claim("claim-0", req("req-0", CLASS_A))], [one()], classes=broken)
    with pytest.raises(AllocationError, match="undeclared reference"):
        allocate([claim("claim-0", req_all("req-0", CLASS_A, selectors=["noSuchVar"]))], [one()])


def test_too_many_devices() -> None:
    with pytest.raises(
        AllocationError, match="^claim claim-0: number of requested devices 500 exceeds the claim limit of 32$"
    ):
        allocate([claim("claim-0", req("req-0", CLASS_A, 500))], [])
    s = one(NODE1, *(f"device-{i}" for i in range(33)))
    assert len(devices_of(allocate([claim("claim-0", req("req-0", CLASS_A, 32))], [s]))[0]) == 32
    with pytest.raises(AllocationError, match="exceeds the claim limit"):
        allocate([claim("claim-0", req("req-0", CLASS_A, 32), req("req-1", CLASS_A))], [s])


def test_prioritized_list() -> None:
    c = claim("claim-0", first_available("req-0", sub("subReq-0", CLASS_B), sub("subReq-1", CLASS_A)))
    assert devices_of(allocate([c], [one()])) == [results(("req-0/subReq-1", DRIVER_A, "pool-1", "device-1"))]
    none = claim("claim-0", first_available("req-0", sub("subReq-0", CLASS_B), sub("subReq-1", CLASS_B)))
    assert allocate([none], [one()]) is None
    # A first subrequest asking for more than a claim may have is passed over.
    big = claim("claim-0", first_available("req-0", sub("subReq-0", CLASS_B, 500), sub("subReq-1", CLASS_A)))
    assert devices_of(allocate([big], [one()])) == [results(("req-0/subReq-1", DRIVER_A, "pool-1", "device-1"))]


def test_prioritized_list_with_backtracking() -> None:
    """The first subrequest takes the one large device the next request needs; the search backs
    up to the second subrequest."""
    big, mid = 'device.attributes["driver-a"].memory >= 8', 'device.attributes["driver-a"].memory >= 4'
    c = claim(
        "claim-0",
        first_available("req-0", sub("subReq-0", CLASS_A, selectors=[big]), sub("subReq-1", CLASS_A, selectors=[mid])),
        req("req-1", CLASS_A, selectors=[big]),
    )
    slices = [
        one(NODE1, device("device-1", {"memory": 8})),
        slice_("slice-2", "pool-2", DRIVER_A, device("device-2", {"memory": 4}), node=NODE1),
    ]
    assert devices_of(allocate([c], slices)) == [
        results(("req-0/subReq-1", DRIVER_A, "pool-2", "device-2"), ("req-1", DRIVER_A, "pool-1", "device-1"))
    ]


def test_prioritized_list_constraint_on_sub_request_and_config() -> None:
    c = claim(
        "claim-0",
        first_available("req-0", sub("subReq-0", CLASS_A, 2), sub("subReq-1", CLASS_A, 1)),
        constraints=[{"requests": ["req-0/subReq-0"], "matchAttribute": "driver-a/numa"}],
        config=[{"requests": ["req-0/subReq-1"], "opaque": {"driver": DRIVER_A, "parameters": {"p": 1}}}],
    )
    s = one(NODE1, device("device-1", {"numa": 1}), device("device-2", {"numa": 2}))
    out = allocate([c], [s], classes=[device_class(CLASS_A, DRIVER_A, config={"c": 1})])
    assert devices_of(out) == [results(("req-0/subReq-1", DRIVER_A, "pool-1", "device-1"))]
    assert out is not None and out[0]["devices"]["config"] == [
        {"source": "FromClass", "requests": ["req-0/subReq-1"], "opaque": {"driver": DRIVER_A, "parameters": {"c": 1}}},
        {"source": "FromClaim", "requests": ["req-0/subReq-1"], "opaque": {"driver": DRIVER_A, "parameters": {"p": 1}}},
    ]


def test_prioritized_list_all_mode_subrequest() -> None:
    c = claim(
        "claim-0",
        first_available("req-0", sub("subReq-0", CLASS_A, mode="All", selectors=[LARGE]), sub("subReq-1", CLASS_A)),
    )
    s = one(NODE1, device("device-1", {"memory": 1}), device("device-2", {"memory": 2}))
    assert devices_of(allocate([c], [s])) == [results(("req-0/subReq-0", DRIVER_A, "pool-1", "device-2"))]


def test_gates_that_are_off_hide_devices() -> None:
    """Binding conditions, counters and per-device node selection are off by default in 1.35."""
    c = [claim("claim-0", req("req-0", CLASS_A))]
    assert allocate(c, [one(NODE1, device("device-1", bindingConditions=["IsPrepared"]))]) is None
    assert allocate(c, [one(NODE1, device("device-1", consumesCounters=[{"counterSet": "s", "counters": {}}]))]) is None
    per_device = slice_("slice-1", "pool-1", DRIVER_A, device("device-1", nodeName=NODE1), perDeviceNodeSelection=True)
    assert allocate(c, [per_device]) is None
    counters = slice_("slice-1", "pool-1", DRIVER_A, "device-1", node=NODE1, sharedCounters=[{"name": "s"}])
    assert allocate(c, [counters]) is None


def test_incomplete_pool_counts_slices_that_do_not_reach_the_node() -> None:
    """A pool of two slices, one per node: complete for either node."""
    slices = [
        slice_("s1", "pool-1", DRIVER_A, "device-1", node=NODE1, count=2),
        slice_("s2", "pool-1", DRIVER_A, "device-2", node=NODE2, count=2),
    ]
    assert devices_of(allocate([claim("claim-0", req_all("req-0", CLASS_A))], slices)) == [
        results(("req-0", DRIVER_A, "pool-1", "device-1"))
    ]


# ---- the bound ----------------------------------------------------------------------------


class _Exploding:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def matches(self, device: DeviceView) -> bool:
        raise self.error


def test_a_selector_that_errors_or_exceeds_its_cost_is_an_error_naming_it() -> None:
    cache = SelectorCache(
        compile_fn=lambda e: _Exploding(CELRuntimeError("operation cancelled: actual cost limit exceeded"))
    )
    c = [claim("claim-0", req("req-0", CLASS_A, selectors=["costly"]), ns="ns")]
    with pytest.raises(AllocationError) as err:
        allocate(c, [one()], classes=[device_class(CLASS_A, DRIVER_A, selectors=[])], selectors=cache)
    assert (
        str(err.value)
        == "claim ns/claim-0: selector #0: CEL runtime error: operation cancelled: actual cost limit exceeded"
    )

    def refuse(e: str) -> Selector:
        raise CELCompileError("estimated cost exceeds the limit")

    with pytest.raises(
        AllocationError, match="^class class-a: selector #0: CEL compile error: estimated cost exceeds the limit$"
    ):
        allocate(c, [one()], selectors=SelectorCache(compile_fn=refuse))
    with pytest.raises(AllocationError, match="CEL runtime error: no such key: nope"):
        allocate(
            [claim("claim-0", req("req-0", CLASS_A, selectors=['device.attributes["driver-a"].nope == 1']))], [one()]
        )


def test_128_requests_are_refused_before_any_search() -> None:
    c = claim("claim-0", *(req(f"r{i}", CLASS_A) for i in range(128)))
    s = one(NODE1, *(f"d{i}" for i in range(128)))
    start = time.monotonic()
    with pytest.raises(AllocationError, match="number of requested devices 128 exceeds the claim limit of 32"):
        allocate([c], [s])
    assert time.monotonic() - start < 1.0


def thousands_of_devices(n_slices: int = 40) -> list[ResourceSlice]:
    """40 network-attached slices of 128 devices: 5120 devices, two cliques per slice."""
    return [
        slice_(
            f"s{k}",
            f"pool-{k}",
            DRIVER_A,
            *(device(f"d{i}", {"clique": f"{k}-{i % 2}", "index": i}) for i in range(128)),
            all_nodes=True,
        )
        for k in range(n_slices)
    ]


def test_thousands_of_devices_an_easy_claim_is_quick() -> None:
    slices = thousands_of_devices()
    start = time.monotonic()
    out = allocate([claim("claim-0", req("gpus", CLASS_A, 8))], slices)
    assert len(devices_of(out)[0]) == 8
    assert time.monotonic() - start < 2.0


def test_thousands_of_devices_a_hopeless_claim_stops_at_the_step_budget() -> None:
    """Nine devices of one clique, where each clique has 64: an exponential search that the
    budget ends with AllocationTimedOut, in bounded time, on every node of the cycle."""
    slices = thousands_of_devices()
    c = claim(
        "claim-0",
        req("gpus", CLASS_A, 9, selectors=['device.attributes["driver-a"].index < 16']),
        constraints=[{"matchAttribute": "driver-a/clique"}],
    )
    a = Allocator([c], set(), {CLASS_A: CLASSES[0]}.get, slices, node_step_budget=50_000, cycle_step_budget=120_000)
    start = time.monotonic()
    with pytest.raises(AllocationTimedOut):
        a.allocate(NODE1, {})
    assert a.steps == 50_001
    with pytest.raises(AllocationTimedOut):
        a.allocate(NODE2, {})
    with pytest.raises(AllocationTimedOut):
        a.allocate("node-3", {})  # the cycle's budget, not the node's, ran out
    assert a.steps == 120_001
    assert time.monotonic() - start < 10.0


def test_the_deadline_stops_a_search() -> None:
    slices = thousands_of_devices(8)
    c = claim(
        "claim-0",
        req("gpus", CLASS_A, 9, selectors=['device.attributes["driver-a"].index < 16']),
        constraints=[{"matchAttribute": "driver-a/clique"}],
    )
    a = Allocator([c], set(), {CLASS_A: CLASSES[0]}.get, slices, node_step_budget=10**9, cycle_step_budget=10**9)
    start = time.monotonic()
    with pytest.raises(AllocationTimedOut, match="deadline"):
        a.allocate(NODE1, {}, deadline=time.monotonic() + 0.2)
    assert time.monotonic() - start < 2.0


def test_many_claims_do_not_exhaust_the_recursion_limit() -> None:
    """128 claims of 32 devices each: 4096 devices deep, on the allocator's own stack."""
    slices = [slice_(f"s{k}", f"pool-{k}", DRIVER_A, *(f"d{i}" for i in range(128)), node=NODE1) for k in range(32)]
    claims = [claim(f"c{i}", req("r", CLASS_A, 32)) for i in range(128)]
    out = allocate(claims, slices, node_step_budget=10**6)
    assert out is not None and len(out) == 128
    seen = {(d["pool"], d["device"]) for r in devices_of(out) for d in r}
    assert len(seen) == 128 * 32


def test_selector_results_are_reused_across_nodes() -> None:
    evaluated: list[str] = []

    class Counting:
        def matches(self, device: DeviceView) -> bool:
            evaluated.append(device.driver)
            return True

    cache = SelectorCache(compile_fn=lambda e: Counting())
    s = slice_("s", "pool-1", DRIVER_A, "d0", "d1", all_nodes=True)
    a = Allocator([claim("c", req("r", CLASS_A))], set(), {CLASS_A: CLASSES[0]}.get, [s], selectors=cache)
    for n in (NODE1, NODE2, "node-3"):
        assert a.allocate(n, {}) is not None
    assert len(evaluated) == 1  # one class selector, one device, once per cycle


def _reference(slots: list[tuple[str, int]], devs: list[tuple[str, int, int]], constrained: bool) -> list[str] | None:
    """Upstream's search without pruning: every order of every request's devices.

    ``slots``: (request, minimum size) per device wanted, in order; ``devs``: (name, size,
    clique) in scan order; ``constrained``: one matchAttribute on the clique over all requests.
    """
    chosen: list[int] = []

    def go(k: int) -> bool:
        if k == len(slots):
            return True
        for i, (_, size, clique) in enumerate(devs):
            if i in chosen or size < slots[k][1]:
                continue
            if constrained and chosen and devs[chosen[0]][2] != clique:
                continue
            chosen.append(i)
            if go(k + 1):
                return True
            chosen.pop()
        return False

    return [devs[i][0] for i in chosen] if go(0) else None


@pytest.mark.parametrize("seed", range(60))
def test_pruned_search_finds_upstreams_first_solution(seed: int) -> None:
    import random

    rnd = random.Random(seed)
    devs = [(f"d{i}", rnd.randint(1, 3), rnd.randint(0, 2)) for i in range(rnd.randint(2, 7))]
    wants = [(f"r{j}", rnd.randint(1, 3), rnd.randint(1, 3)) for j in range(rnd.randint(1, 3))]
    constrained = rnd.random() < 0.6
    s = one(NODE1, *(device(n, {"size": size, "clique": clique}) for n, size, clique in devs))
    c = claim(
        "c",
        *(
            req(name, CLASS_A, count, selectors=[f'device.attributes["driver-a"].size >= {size}'])
            for name, count, size in wants
        ),
        constraints=[{"matchAttribute": "driver-a/clique"}] if constrained else [],
    )
    slots = [(name, size) for name, count, size in wants for _ in range(count)]
    want = _reference(slots, devs, constrained)
    out = allocate([c], [s]) if sum(n for _, n, _ in wants) <= 32 else None
    got = None if out is None else [d["device"] for d in devices_of(out)[0]]
    if want is not None:
        # Upstream's first solution already has each request's devices in scan order.
        order = {n: i for i, (n, _, _) in enumerate(devs)}
        k = 0
        for _, count, _ in wants:
            assert want[k : k + count] == sorted(want[k : k + count], key=order.__getitem__)
            k += count
    assert got == want


def test_a_real_selector_past_the_cost_limit_is_an_error_naming_it() -> None:
    """Five nested comprehensions over ten items: 100,000 iterations, past the adapter's bound."""
    ten = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
    expr = "true"
    for v in "abcde":
        expr = f"{ten}.all({v}, {expr})"
    c = claim("claim-0", req("req-0", CLASS_A, selectors=[expr]))
    start = time.monotonic()
    with pytest.raises(AllocationError) as err:
        allocate([c], [one()])
    assert (
        str(err.value)
        == "claim claim-0: selector #0: CEL runtime error: operation cancelled: actual cost limit exceeded"
    )
    assert time.monotonic() - start < 2.0
