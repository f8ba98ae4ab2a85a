"""The scheduler's DRA state: claims with assumed and in-flight allocations, slices, classes.

Mirrors ``pkg/scheduler/framework/plugins/dynamicresources/dra_manager.go`` (``DefaultDRAManager``
and its ``claimTracker``), ``allocateddevices.go`` and the ``AssumeCache`` of
``pkg/scheduler/util/assumecache`` that holds the claims (v1.35.4). Like
:class:`~ome_scheduler.plugins.volumestore.VolumeStore`, informers fill it (``app/informers.py``:
``on_claim_*``, ``on_slice_*``, ``on_class_*``) and the scheduler hands it to plugins through the
Handle (``Scheduler.dra_manager``). It does no I/O.

* **Claims** are kept as the informer delivered them and, after a PreBind write, as the API
  server answered (``assume_claim_after_api_call``): the newer resourceVersion wins, so the
  informer's older copy does not undo a write it has not caught up with yet.
  ``assumed_claim_restore`` drops the assumed copy.
* **In-flight allocations** (``signal_claim_pending_allocation`` at Reserve,
  ``remove_claim_pending_allocation`` after PreBind or at Unreserve): a claim whose allocation
  is decided but not yet written. Its devices count as allocated, and another pod sharing the
  claim waits (``claim_has_pending_allocation``) instead of racing the write.
* **Allocated devices** (``list_all_allocated_devices``): every (driver, pool, device) allocated
  exclusively by a claim the cache holds (assumed copies included; admin-access results
  excluded) or by an in-flight allocation: what the allocator must not give again. Kept
  current from the claim events rather than rebuilt per cycle. Unlike upstream's set, a device
  counts as allocated as long as *any* claim holds it, so a (never expected) double allocation
  is not freed by the first of its claims to go.

* **Device changes** (``device_changes``): a feed of the nodes whose free devices may have
  changed (a slice of a node, an allocation, in flight or written, local to one node), read by
  OMEGangPack's device room (``plugins/gangpack/deviceroom.py``) the way it reads the cache's node
  changes; a change that can reach several nodes (a network-attached slice, an allocation
  without a single-node selector) asks the reader to recount every node.

Every change of a claim (the informer's or an assumption's), slice or class is passed to
``move`` as a cluster event, as upstream's event handlers are registered on the assume cache,
the slice tracker and the class informer; the queue then asks DynamicResources' queueing hints.
Handlers run on the event loop between cycles, so no state here needs a lock and upstream's
"conflicting concurrent modification" retry has nothing to guard.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ome_scheduler.api.resource import DeviceClass, ResourceClaim, ResourceSlice
from ome_scheduler.dra.allocator import DeviceID
from ome_scheduler.framework.events import DEVICE_CLASS, RESOURCE_CLAIM, RESOURCE_SLICE, ActionType, ClusterEvent

MoveFn = Callable[[ClusterEvent, Any, Any], None]

DEVICE_LOG_MAX = 4096
"""Entries the device change feed keeps; a reader further behind recounts every node."""


def _rv(claim: ResourceClaim) -> int:
    try:
        return int(claim.metadata.resource_version or 0)
    except ValueError:
        return 0


def _key(claim: ResourceClaim) -> str:
    return f"{claim.metadata.namespace}/{claim.metadata.name}"


def allocation_node(claim: ResourceClaim | None) -> str | None:
    """The one node an allocation's node selector names (``metadata.name In [node]``, as the
    allocator writes it for node-local devices), "" when the claim is not allocated, None when
    the allocation may reach several nodes."""
    if claim is None or claim.status.allocation is None:
        return ""
    sel = claim.status.allocation.node_selector
    if sel is None or len(sel.node_selector_terms) != 1:
        return None
    term = sel.node_selector_terms[0]
    if term.match_expressions or len(term.match_fields) != 1:
        return None
    f = term.match_fields[0]
    if f.key != "metadata.name" or f.operator != "In" or len(f.values) != 1:
        return None
    return f.values[0]


def allocated_devices_of(claim: ResourceClaim) -> list[DeviceID]:
    """``foreachAllocatedDevice``: the devices the claim's allocation holds exclusively
    (results with ``adminAccess`` are shared and left out); empty when not allocated."""
    alloc = claim.status.allocation
    if alloc is None:
        return []
    return [(r.driver, r.pool, r.device) for r in alloc.devices.results if not r.admin_access]


class DRAManager:
    """``DefaultDRAManager``: the claim tracker, the slice lister and the class lister in one.

    ``move(event, old, new)`` is called with each claim, slice and class event (None when
    building only a configuration check).
    """

    def __init__(self, move: MoveFn | None = None) -> None:
        self.move = move
        self._api: dict[str, ResourceClaim] = {}
        self._latest: dict[str, ResourceClaim] = {}
        self._in_flight: dict[str, ResourceClaim] = {}
        self._allocated: dict[DeviceID, int] = {}
        self._slices: dict[str, ResourceSlice] = {}
        self._classes: dict[str, DeviceClass] = {}
        self.slice_generation = 0
        """Bumped by every slice change (what a cached index of the slices is keyed by)."""
        self.device_generation = 0
        """Bumped by every change of the free devices: a slice, an allocation appearing or
        going (in flight too), a class."""
        self._device_log: list[str | None] = []
        self._device_base = 0
        """The feed position of ``_device_log[0]``."""

    # ---- ResourceClaimTracker -----------------------------------------------------------

    def get_claim(self, namespace: str, name: str) -> ResourceClaim | None:
        """``Get``: the claim ``namespace/name``, an assumed copy first; None when unknown."""
        return self._latest.get(f"{namespace}/{name}")

    def claim_api_object(self, namespace: str, name: str) -> ResourceClaim | None:
        """The informer's copy, ignoring an assumed one (``GetAPIObj``)."""
        return self._api.get(f"{namespace}/{name}")

    def list_claims(self) -> list[ResourceClaim]:
        """``List``: every claim (assumed copies first)."""
        return list(self._latest.values())

    def claim_has_pending_allocation(self, uid: str) -> bool:
        """``ClaimHasPendingAllocation``: Reserve decided this claim's allocation, PreBind has
        not written it yet."""
        return uid in self._in_flight

    def signal_claim_pending_allocation(self, uid: str, allocated: ResourceClaim) -> None:
        """``SignalClaimPendingAllocation``: ``allocated`` (the claim with its new allocation)
        is being written; its devices count as allocated until it is removed."""
        self._in_flight[uid] = allocated
        self._devices_changed(allocation_node(allocated))

    def remove_claim_pending_allocation(self, uid: str) -> bool:
        """``RemoveClaimPendingAllocation``: whether an in-flight allocation was removed."""
        gone = self._in_flight.pop(uid, None)
        if gone is None:
            return False
        self._devices_changed(allocation_node(gone))
        return True

    def pending_allocation(self, uid: str) -> ResourceClaim | None:
        """The in-flight copy of claim ``uid`` (with the allocation Reserve chose), or None."""
        return self._in_flight.get(uid)

    def list_all_allocated_devices(self) -> set[DeviceID]:
        """``ListAllAllocatedDevices``: devices held by the cached claims or being allocated."""
        out = set(self._allocated)
        for claim in self._in_flight.values():
            out.update(allocated_devices_of(claim))
        return out

    def held_by_cached_claims(self, devices: Iterable[DeviceID]) -> list[DeviceID]:
        """Which of ``devices`` an allocation of a cached claim (the informer's or an assumed
        one) holds, in order; in-flight allocations are not counted."""
        return [d for d in devices if self._allocated.get(d, 0) > 0]

    def assume_claim_after_api_call(self, claim: ResourceClaim) -> None:
        """``AssumeClaimAfterAPICall``: keep ``claim`` (as the API server returned it) until the
        informer delivers the same or a newer version.

        Raises:
            KeyError: the claim is not in the cache (``could not find ResourceClaim "ns/name"``).
            ValueError: ``claim`` is older than the cached version (``... is out of sync ...``).
        """
        key = _key(claim)
        cur = self._latest.get(key)
        if cur is None:
            raise KeyError(f'could not find ResourceClaim "{key}"')
        if _rv(claim) < _rv(cur):
            raise ValueError(f'ResourceClaim "{key}" is out of sync (stored: {_rv(cur)}, assume: {_rv(claim)})')
        self._latest[key] = claim
        self._claim_event(ActionType.UPDATE, cur, claim)

    def assumed_claim_restore(self, namespace: str, name: str) -> None:
        """``AssumedClaimRestore``: the informer's copy wins again (no-op when none is assumed)."""
        key = f"{namespace}/{name}"
        api, cur = self._api.get(key), self._latest.get(key)
        if api is None or cur is None or cur is api:
            return
        self._latest[key] = api
        self._claim_event(ActionType.UPDATE, cur, api)

    # ---- the device change feed ------------------------------------------------------------

    def device_cursor(self) -> int:
        """The device change feed's current position (pass it to :meth:`device_changes`)."""
        return self._device_base + len(self._device_log)

    def device_changes(self, cursor: int) -> tuple[int, set[str] | None]:
        """(the current position, the nodes whose free devices may have changed since
        ``cursor``); None instead of the set when some change may reach any node or ``cursor``
        is older than the feed keeps (recount every node)."""
        end = self.device_cursor()
        if cursor < self._device_base or cursor > end:
            return end, None
        out: set[str] = set()
        for n in self._device_log[cursor - self._device_base :]:
            if n is None:
                return end, None
            out.add(n)
        return end, out

    def _devices_changed(self, node: str | None) -> None:
        """Record a change of the free devices of ``node`` (None: maybe any node; "": none)."""
        if node == "":
            return
        self.device_generation += 1
        log = self._device_log
        log.append(node)
        if len(log) > DEVICE_LOG_MAX:
            drop = len(log) // 2
            del log[:drop]
            self._device_base += drop

    # ---- listers --------------------------------------------------------------------------

    def resource_slices(self) -> list[ResourceSlice]:
        """``ListWithDeviceTaintRules`` (DRADeviceTaintRules is off: the slices as published)."""
        return list(self._slices.values())

    def device_class(self, name: str) -> DeviceClass | None:
        """``DeviceClasses().Get``: the class, or None when it does not exist."""
        return self._classes.get(name)

    def device_classes(self) -> Iterable[DeviceClass]:
        """``DeviceClasses().List``."""
        return self._classes.values()

    # ---- informer handlers: claims (the assume cache's add/update/delete) ----------------

    def on_claim_add(self, claim: ResourceClaim) -> None:
        """Informer handler: store ``claim`` unless the cache holds the same or a newer version."""
        key = _key(claim)
        cur = self._latest.get(key)
        if cur is not None and _rv(claim) <= _rv(cur):
            return
        self._api[key] = claim
        self._latest[key] = claim
        self._claim_event(ActionType.ADD if cur is None else ActionType.UPDATE, cur, claim)

    def on_claim_update(self, old: ResourceClaim, new: ResourceClaim) -> None:
        """Informer handler: as :meth:`on_claim_add` (the old object is the cache's own)."""
        self.on_claim_add(new)

    def on_claim_delete(self, claim: ResourceClaim) -> None:
        """Informer handler: forget the claim (an assumed copy too)."""
        key = _key(claim)
        self._api.pop(key, None)
        cur = self._latest.pop(key, None)
        if cur is not None:
            self._claim_event(ActionType.DELETE, cur, None)
        elif self.move is not None:  # never cached: nothing was counted for it
            self.move(ClusterEvent(RESOURCE_CLAIM, ActionType.DELETE), claim, None)

    def _claim_event(self, action: ActionType, old: ResourceClaim | None, new: ResourceClaim | None) -> None:
        # allocatedDevices' handlers: allocations are immutable, so only appearing and
        # disappearing ones change the set.
        was = old is not None and old.status.allocation is not None
        now = new is not None and new.status.allocation is not None
        if was != now:
            self._devices_changed(allocation_node(old if was else new))
        if old is not None and was and not now:
            for d in allocated_devices_of(old):
                n = self._allocated.get(d, 0) - 1
                if n > 0:
                    self._allocated[d] = n
                else:
                    self._allocated.pop(d, None)
        elif new is not None and now and not was:
            for d in allocated_devices_of(new):
                self._allocated[d] = self._allocated.get(d, 0) + 1
        if self.move is not None:
            self.move(ClusterEvent(RESOURCE_CLAIM, action), old, new)

    # ---- informer handlers: slices and classes --------------------------------------------

    def on_slice_add(self, s: ResourceSlice) -> None:
        """Informer handler: remember the slice and emit the cluster event."""
        self._slices[s.metadata.name] = s
        self.slice_generation += 1
        self._devices_changed(s.spec.node_name or None)
        self._emit(RESOURCE_SLICE, ActionType.ADD, None, s)

    def on_slice_update(self, old: ResourceSlice, new: ResourceSlice) -> None:
        """Informer handler: remember the slice and emit the cluster event."""
        self._slices[new.metadata.name] = new
        self.slice_generation += 1
        self._devices_changed(old.spec.node_name or None)
        if new.spec.node_name != old.spec.node_name:
            self._devices_changed(new.spec.node_name or None)
        self._emit(RESOURCE_SLICE, ActionType.UPDATE, old, new)

    def on_slice_delete(self, s: ResourceSlice) -> None:
        """Informer handler: forget the slice and emit the cluster event."""
        self._slices.pop(s.metadata.name, None)
        self.slice_generation += 1
        self._devices_changed(s.spec.node_name or None)
        self._emit(RESOURCE_SLICE, ActionType.DELETE, s, None)

    def on_class_add(self, c: DeviceClass) -> None:
        """Informer handler: remember the class and emit the cluster event."""
        self._classes[c.metadata.name] = c
        self._devices_changed(None)
        self._emit(DEVICE_CLASS, ActionType.ADD, None, c)

    def on_class_update(self, old: DeviceClass, new: DeviceClass) -> None:
        """Informer handler: remember the class and emit the cluster event."""
        self._classes[new.metadata.name] = new
        self._devices_changed(None)
        self._emit(DEVICE_CLASS, ActionType.UPDATE, old, new)

    def on_class_delete(self, c: DeviceClass) -> None:
        """Informer handler: forget the class and emit the cluster event."""
        self._classes.pop(c.metadata.name, None)
        self._devices_changed(None)
        self._emit(DEVICE_CLASS, ActionType.DELETE, c, None)

    def _emit(self, resource: str, action: ActionType, old: Any, new: Any) -> None:
        if self.move is not None:
            self.move(ClusterEvent(resource, action), old, new)
