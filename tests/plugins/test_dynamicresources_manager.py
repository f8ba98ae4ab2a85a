"""The DRA manager (``plugins/dynamicresources/manager.py``): the claims' assume cache, in-flight
allocations, allocated devices and the cluster events it emits; and the pod event for claims
generated from templates."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ome_scheduler.api.core import Pod
from ome_scheduler.api.resource import ResourceClaim
from ome_scheduler.framework.events import ActionType, ClusterEvent, pod_scheduling_properties_change
from ome_scheduler.plugins.dynamicresources.manager import DRAManager
from tests.dra.objects import claim, device_class, req, slice_
from tests.support.plugins_env import pod

ALLOC = {
    "devices": {
        "results": [
            {"request": "r", "driver": "d", "pool": "p", "device": "g0"},
            {"request": "r", "driver": "d", "pool": "p", "device": "g1", "adminAccess": True},
        ]
    }
}


def allocated(c: ResourceClaim, rv: str) -> ResourceClaim:
    raw = msgspec.to_builtins(c)
    raw["metadata"]["resourceVersion"] = rv
    raw["status"] = {"allocation": ALLOC}
    return msgspec.convert(raw, ResourceClaim)


def with_rv(c: ResourceClaim, rv: str) -> ResourceClaim:
    return msgspec.structs.replace(c, metadata=msgspec.structs.replace(c.metadata, resource_version=rv))


def test_assume_cache_allocated_devices_and_events() -> None:
    events: list[tuple[ClusterEvent, Any, Any]] = []
    m = DRAManager(lambda ev, old, new: events.append((ev, old, new)))
    c = claim("c", req("r", "cls"), ns="ns")
    m.on_claim_add(c)
    assert m.get_claim("ns", "c") is c and m.list_all_allocated_devices() == set()
    written = allocated(c, "5")
    m.assume_claim_after_api_call(written)
    assert m.get_claim("ns", "c") is written and m.claim_api_object("ns", "c") is c
    assert m.list_all_allocated_devices() == {("d", "p", "g0")}  # admin access is shared, not counted
    # The informer's older or same version changes nothing; a newer one replaces both copies.
    m.on_claim_update(c, with_rv(c, "4"))
    assert m.get_claim("ns", "c") is written
    newer = allocated(c, "6")
    m.on_claim_update(c, newer)
    assert m.get_claim("ns", "c") is newer and m.claim_api_object("ns", "c") is newer
    assert m.list_all_allocated_devices() == {("d", "p", "g0")}
    with pytest.raises(ValueError, match=r'^ResourceClaim "ns/c" is out of sync \(stored: 6, assume: 5\)$'):
        m.assume_claim_after_api_call(written)
    with pytest.raises(KeyError):
        m.assume_claim_after_api_call(claim("gone", ns="ns"))
    m.on_claim_delete(newer)
    assert m.get_claim("ns", "c") is None and m.list_all_allocated_devices() == set()
    m.on_claim_delete(newer)  # a delete of what is not cached counts nothing down
    assert [(e.resource, e.action) for e, _, _ in events] == [
        ("resource.k8s.io/ResourceClaim", ActionType.ADD),
        ("resource.k8s.io/ResourceClaim", ActionType.UPDATE),
        ("resource.k8s.io/ResourceClaim", ActionType.UPDATE),
        ("resource.k8s.io/ResourceClaim", ActionType.DELETE),
        ("resource.k8s.io/ResourceClaim", ActionType.DELETE),
    ]


def test_restore_and_in_flight_allocations() -> None:
    m = DRAManager()
    c = claim("c", ns="ns")
    m.on_claim_add(c)
    m.assume_claim_after_api_call(allocated(c, "2"))
    m.assumed_claim_restore("ns", "c")
    assert m.get_claim("ns", "c") is c and m.list_all_allocated_devices() == set()
    m.assumed_claim_restore("ns", "c")  # nothing assumed: no-op
    m.signal_claim_pending_allocation(c.metadata.uid, allocated(c, "1"))
    assert m.claim_has_pending_allocation(c.metadata.uid)
    assert m.list_all_allocated_devices() == {("d", "p", "g0")}
    assert m.remove_claim_pending_allocation(c.metadata.uid) is True
    assert m.remove_claim_pending_allocation(c.metadata.uid) is False
    assert m.list_all_allocated_devices() == set()


def test_a_device_held_twice_stays_allocated_until_both_go() -> None:
    m = DRAManager()
    a, b = allocated(claim("a", ns="ns"), "1"), allocated(claim("b", ns="ns"), "1")
    m.on_claim_add(a)
    m.on_claim_add(b)
    m.on_claim_delete(a)
    assert m.list_all_allocated_devices() == {("d", "p", "g0")}
    m.on_claim_delete(b)
    assert m.list_all_allocated_devices() == set()


def test_slices_and_classes() -> None:
    events: list[str] = []
    m = DRAManager(lambda ev, old, new: events.append(ev.label()))
    s = slice_("s", "p", "d", "g0", node="n")
    m.on_slice_add(s)
    m.on_slice_update(s, s)
    c = device_class("gpu", "d")
    m.on_class_add(c)
    assert m.resource_slices() == [s] and m.device_class("gpu") is c and list(m.device_classes()) == [c]
    m.on_slice_delete(s)
    m.on_class_delete(c)
    assert m.resource_slices() == [] and m.device_class("gpu") is None
    assert events == [
        "ResourceSliceAdd",
        "ResourceSliceUpdate",
        "DeviceClassAdd",
        "ResourceSliceDelete",
        "DeviceClassDelete",
    ]


def test_generated_claims_in_the_pod_status_are_their_own_pod_event() -> None:
    old = pod("p", spec={"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]})
    raw = msgspec.to_builtins(old)
    raw["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu"}]}
    new = msgspec.convert(raw, Pod)
    assert pod_scheduling_properties_change(new, old) == [
        ClusterEvent("UnschedulablePod", ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM)
    ]
    assert pod_scheduling_properties_change(new, new) == [ClusterEvent("UnschedulablePod", ActionType.UPDATE)]
