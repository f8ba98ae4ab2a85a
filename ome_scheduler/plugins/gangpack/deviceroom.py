"""Device room: how many members a node takes when their devices come from ResourceClaims (§3.1).

:func:`~ome_scheduler.plugins.gangpack.fit.member_capacity` counts cpu, memory and extended
resources only; a member whose GPUs come from DRA has no ``nvidia.com/gpu`` request, so its room
would be the node's pod slots. :class:`DeviceRoom` caps that count by the copies of the member's
claims the node's free devices satisfy, decided by the structured allocator itself
(``ome_scheduler/dra/allocator.py``, the same search DynamicResources' Filter runs), so no second
selector evaluator exists.

What is modelled, per member shape (members whose ``spec.resourceClaims`` are equal, e.g. the
replicas of one template):

* **Per-member claims** (entries with ``resourceClaimTemplateName``: each member its own claim,
  all made from one template): the node takes ``k`` members when ``k`` copies of the claims can
  be allocated one after the other on it, each copy's devices taken before the next is tried
  (the tentative overlay: member *i*'s picks are visible to member *i+1*, in the order and with
  the first fit Filter and Reserve will use). Free means: devices of the slices that reach the
  node, minus those allocated by any claim, in flight (Reserve'd, not yet written: a placed
  sibling's too), or picked for an earlier copy. The claim of the first member whose claims
  exist stands for every member of the shape (the copies are of its spec; a member whose own
  claim is already allocated, as after a failed binding, finds those devices taken: the count
  errs low, never high).
* **Shared claims** (``resourceClaimName``, one claim for many pods): allocated, its node
  selector must admit the node (else the node takes none); unallocated, it must be allocatable on
  the node together with the first copy (its devices then join the overlay). That the first
  member's allocation of it then pins every other member to its nodes is not modelled here;
  Filter enforces it.
* **Network-attached pools** (slices with ``allNodes`` or a ``nodeSelector``): their devices are
  visible to many nodes, so a per-node count could promise them several times. A node whose copy
  takes any device from a pool that is not local to it is not capped by devices at all (the
  room is what ``member_capacity`` says, as before DRA room existed); Filter and the Permit gate
  (all or nothing) decide. Only node-local pools (``spec.nodeName``) are counted.
* A shape the allocator cannot judge (a claim of a sibling not created yet, a broken claim or
  class, the step budget run out) is not capped either: Filter reports its reason.

Several shapes of one gang are counted each on its own (one shape's picks are not visible to
another's). Pods without ``spec.resourceClaims`` never reach this module: the planner keeps
``member_capacity`` and ``template_signature`` for them.

The counts depend on the DRA state, not only on the nodes: :meth:`DeviceRoom.sync_index` brings a
:class:`~ome_scheduler.plugins.gangpack.placement.RoomIndex` up to date from the DRA manager's
device change feed (``DRAManager.device_changes``: slices, allocations appearing or going, in
flight or written), and the queueing hints (:func:`device_events`) wake a member on the slice and
claim events that can add device room.

Cost: one :class:`~ome_scheduler.dra.allocator.Allocator` per shape per change of the DRA state
(O(slices) to index them), then per node at most ``k + 1`` allocator searches of at most
:data:`NODE_STEPS` steps each; all nodes of one state together at most :data:`PASS_STEPS` steps
(about 1.5 s of CPython at worst, see the allocator's bound), after which the shape is not capped.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ome_scheduler.api.core import Pod
from ome_scheduler.api.resource import ResourceClaim
from ome_scheduler.dra.allocator import (
    CYCLE_STEP_BUDGET,
    AllocationError,
    AllocationTimedOut,
    Allocator,
    DeviceID,
    NodeAllocationFailed,
    SelectorCache,
)
from ome_scheduler.framework.events import (
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    ActionType,
    ClusterEventWithHint,
    QueueingHint,
    on,
    queueing_hint,
)
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.plugins.dynamicresources.claims import ClaimError, pod_claims
from ome_scheduler.plugins.dynamicresources.manager import DRAManager
from ome_scheduler.plugins.gangpack.placement import CapacityFn, RoomIndex
from ome_scheduler.util.labels import NodeSelectorMatcher

NODE_STEPS = 20_000
"""Allocator steps one search of the device room may take on one node."""
PASS_STEPS = CYCLE_STEP_BUDGET
"""Allocator steps all nodes together may take for one shape and one DRA state."""
MSG_CANNOT_ALLOCATE = "cannot allocate all claims"
"""DynamicResources' Filter message, named in ``explain`` for a node that takes no member."""
MSG_NOT_AVAILABLE = "resourceclaim not available on the node"

_ENC = msgspec.json.Encoder()
Signature = Callable[[PodInfo], Hashable]


def has_claims(templates: Sequence[PodInfo]) -> bool:
    """Whether some member has ``spec.resourceClaims`` (the device room applies)."""
    return any(t.pod.spec.resource_claims for t in templates)


def manager_of(handle: Any) -> DRAManager | None:
    """The handle's DRA manager (``Handle.dra_manager``), or None when it has none."""
    fn = getattr(handle, "dra_manager", None)
    if fn is None:
        return None
    m = fn()
    return m if isinstance(m, DRAManager) else None


@dataclass
class _Shape:
    """One member shape's claims as the allocator sees them, for one DRA state."""

    first: Allocator | None
    """Allocates the shared unallocated claims plus one copy of the per-member claims (None:
    nothing to allocate)."""
    rest: Allocator | None
    """Allocates one more copy of the per-member claims (None: nothing to allocate)."""
    pinned: list[NodeSelectorMatcher] = field(default_factory=list)
    """Node selectors of the allocated shared claims: the node must match each."""
    unmodelled: bool = False
    """The allocator could not judge this shape (an error or the budget): not capped."""


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """One node's device count for a member shape: ``copies`` members (``counted``: the devices
    were counted; False when they are not modelled there and ``copies`` is the limit), and the
    DRA reason it takes none (empty when it takes some)."""

    copies: int
    counted: bool
    reason: str = ""


class DeviceRoom:
    """Members' device room per node, over the DRA manager ``manager()`` returns (None: no DRA).

    One instance lives as long as its OMEGangPack (or one ``explain`` run); what it caches is
    dropped whenever the manager's ``device_generation`` moves.
    """

    def __init__(self, manager: Callable[[], DRAManager | None]) -> None:
        self._manager = manager
        self.selectors = SelectorCache()
        self._generation = -1
        self._shapes: dict[bytes, _Shape] = {}
        self._allocated: set[DeviceID] = set()
        self._local: dict[tuple[str, str], str] = {}
        """(driver, pool) -> the node its slices are local to."""
        self._standins: dict[bytes, PodInfo] = {}
        """Per shape, the member of the current plan whose claims stand for the shape."""

    # ---- the planner's hooks --------------------------------------------------------------

    def capacity(
        self, base: CapacityFn[PodInfo, NodeInfo], templates: Sequence[PodInfo] = ()
    ) -> CapacityFn[PodInfo, NodeInfo]:
        """``base`` capped by the device room for members with claims (others: ``base`` as is).

        ``templates`` (the current member first) stand for their shapes from now on: a room
        index made for an earlier member recounts with the claims of the live ones."""
        self._standins = {device_signature(t.pod): t for t in reversed(templates) if t.pod.spec.resource_claims}

        def cap(pod: PodInfo, node: NodeInfo) -> int:
            n = base(pod, node)
            if n <= 0 or not pod.pod.spec.resource_claims:
                return n
            return self.count(pod, node, n).copies

        return cap

    @staticmethod
    def signature(base: Signature) -> Signature:
        """``base`` plus the member's ``spec.resourceClaims`` (members with other claims are
        another shape)."""

        def sig(pod: PodInfo) -> Hashable:
            return (base(pod), device_signature(pod.pod))

        return sig

    def sync_index(self, index: RoomIndex[PodInfo, NodeInfo], get_node: Callable[[str], NodeInfo | None]) -> bool:
        """Bring ``index`` up to date with the device changes since its ``device_cursor``;
        returns False when every node must be recounted (the caller rebuilds the index)."""
        m = self._manager()
        if m is None:
            return True
        cursor, changed = m.device_changes(index.device_cursor)
        index.device_cursor = cursor
        if changed is None:
            return False
        if changed:
            index.refresh({name: get_node(name) for name in changed})
        return True

    def device_cursor(self) -> int:
        """The DRA manager's device feed position (0 without a manager)."""
        m = self._manager()
        return m.device_cursor() if m is not None else 0

    # ---- counting -------------------------------------------------------------------------

    def count(self, pod: PodInfo, node: NodeInfo, limit: int) -> NodeDevices:
        """How many members like ``pod`` (at most ``limit``) the free devices of ``node`` take,
        each copy's devices taken before the next is tried."""
        if limit <= 0:
            return NodeDevices(0, True)
        shape = self._shape(pod)
        if shape is None or shape.unmodelled:
            return NodeDevices(limit, False)
        for sel in shape.pinned:
            if not sel.matches(node.name, node.labels):
                return NodeDevices(0, True, MSG_NOT_AVAILABLE)
        taken: list[DeviceID] = []
        allocated = self._allocated
        k, reason = 0, ""
        try:
            while k < limit:
                a = shape.first if k == 0 else shape.rest
                if a is None:
                    return NodeDevices(limit, True)  # nothing (more) to allocate
                results = a.allocate(node.name, node.labels)
                if results is None:
                    reason = MSG_CANNOT_ALLOCATE
                    break
                picks = [(r.driver, r.pool, r.device) for x in results for r in x.devices.results if not r.admin_access]
                if any(self._local.get((d[0], d[1])) != node.name for d in picks):
                    return NodeDevices(limit, False)  # a network-attached device: not counted here
                for d in picks:
                    allocated.add(d)
                    taken.append(d)
                k += 1
        except NodeAllocationFailed as exc:
            k, reason = 0, str(exc)
        except (AllocationError, AllocationTimedOut):
            shape.unmodelled = True
            return NodeDevices(limit, False)
        finally:
            for d in taken:
                allocated.discard(d)
        return NodeDevices(k, True, reason)

    def _shape(self, pod: PodInfo) -> _Shape | None:
        """The allocators of ``pod``'s shape for the current DRA state (None: its claims cannot
        be looked up now; nothing is remembered then)."""
        m = self._manager()
        if m is None:
            return None
        if m.device_generation != self._generation:
            self._generation = m.device_generation
            self._shapes.clear()
            self._allocated = m.list_all_allocated_devices()
            self._local = {
                (s.spec.driver, s.spec.pool.name): s.spec.node_name for s in m.resource_slices() if s.spec.node_name
            }
        key = device_signature(pod.pod)
        shape = self._shapes.get(key)
        if shape is not None:
            return shape
        claims = None
        for p in (self._standins.get(key), pod):
            if p is None:
                continue
            try:
                claims = pod_claims(p.pod, m.get_claim)
            except ClaimError:
                continue
            break
        if claims is None:
            return None
        own_entries = {e.name for e in pod.pod.spec.resource_claims if e.resource_claim_template_name is not None}
        own: list[ResourceClaim] = []
        shared: list[ResourceClaim] = []
        pinned: list[NodeSelectorMatcher] = []
        for entry, c in claims:
            if entry in own_entries:
                own.append(msgspec.structs.replace(c, status=msgspec.structs.replace(c.status, allocation=None)))
            elif c.status.allocation is None:
                shared.append(c)
            elif c.status.allocation.node_selector is not None:
                pinned.append(NodeSelectorMatcher.from_node_selector(c.status.allocation.node_selector))
        slices = m.resource_slices()

        def allocator(cs: list[ResourceClaim]) -> Allocator | None:
            if not cs:
                return None
            return Allocator(
                cs,
                self._allocated,
                m.device_class,
                slices,
                selectors=self.selectors,
                node_step_budget=NODE_STEPS,
                cycle_step_budget=PASS_STEPS,
            )

        first = allocator(shared + own)
        rest = first if not shared else allocator(own)
        if rest is not None and first is not None and rest is not first:
            rest.budget = first.budget  # one pass budget for the shape
        shape = _Shape(first, rest, pinned)
        self._shapes[key] = shape
        return shape


def device_signature(pod: Pod) -> bytes:
    """The member's namespace and ``spec.resourceClaims``, encoded: equal for the replicas of
    one template (claim and template names are namespaced)."""
    return pod.metadata.namespace.encode() + b"\0" + _ENC.encode(pod.spec.resource_claims)


# ---- queueing hints (§6.2) --------------------------------------------------------------------


def device_events() -> list[ClusterEventWithHint[Any]]:
    """OMEGangPack's registrations for device room: slice adds and updates, claim updates and
    deletes (an allocation going frees devices)."""
    return [
        on(RESOURCE_SLICE, ActionType.ADD | ActionType.UPDATE, is_schedulable_after_slice_change),
        on(RESOURCE_CLAIM, ActionType.UPDATE | ActionType.DELETE, is_schedulable_after_claim_change),
    ]


@queueing_hint
def is_schedulable_after_slice_change(target: Pod, old: Any, new: Any) -> QueueingHint:
    """ResourceSlice Add/Update: Queue a target with claims (a domain may have device room now)."""
    if not target.spec.resource_claims:
        return QueueingHint.QUEUE_SKIP  # the target claims no devices
    return QueueingHint.QUEUE  # devices appeared or changed


@queueing_hint
def is_schedulable_after_claim_change(
    target: Pod, old: ResourceClaim | None, new: ResourceClaim | None
) -> QueueingHint:
    """ResourceClaim Update/Delete: Queue a target with claims when an allocation went away
    (devices were freed) or the claim is one of the target's own."""
    if not target.spec.resource_claims:
        return QueueingHint.QUEUE_SKIP  # the target claims no devices
    obj = new if new is not None else old
    if obj is not None and obj.metadata.namespace == target.metadata.namespace:
        names = {s.resource_claim_name for s in target.status.resource_claim_statuses}
        names |= {e.resource_claim_name for e in target.spec.resource_claims}
        if obj.metadata.name in names:
            return QueueingHint.QUEUE  # one of the target's own claims changed
    if old is not None and old.status.allocation is not None and (new is None or new.status.allocation is None):
        return QueueingHint.QUEUE  # an allocation was released: devices are free
    return QueueingHint.QUEUE_SKIP  # no device was freed
