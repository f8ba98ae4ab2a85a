"""DynamicResources: pods get the devices their ResourceClaims ask for (DRA with structured parameters).

Mirrors ``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go`` (v1.35.4) with
1.35's default feature gates (``docs/design/dra.md`` lists them). Every rejection is
UnschedulableAndUnresolvable with upstream's text, as upstream's ``statusUnschedulable`` makes it:

* **PreEnqueue** keeps a pod out of activeQ while one of its claims is not created yet from its
  template (``pod "ns/p": ResourceClaim not created yet``), missing (``could not find
  ResourceClaim "ns/c"``), being deleted (``resourceclaim "c" is being deleted``) or, when made
  from a template, not owned by the pod. An update of the pod's ``status.resourceClaimStatuses``
  or of the claim lets it in (queueing hints).
* **PreFilter** looks the claims up again, returns Skip for a pod without claims, reads the node
  selectors of the allocated claims, and for the unallocated ones checks that no other pod's
  allocation of them is in flight (``resource claim ns/c is in the process of being
  allocated``) and that every device class exists (``request r: device class x does not
  exist``); then it builds the cycle's allocator over the devices not allocated already
  (``ome_scheduler/dra/allocator.py``).
* **Filter**, per node: an allocated claim whose node selector rejects the node makes it
  ``resourceclaim not available on the node``; the unallocated claims must be allocatable there
  (``cannot allocate all claims``; ``timed out trying to allocate devices`` after the
  ``filterTimeout`` argument, default 10 s, or the allocator's step budget; the allocator's own
  message for an invalid pool). A broken claim or class (a CEL error, ``All`` devices of an
  incomplete pool, more than 32 devices) is an Error status that fails the attempt.
* **PostFilter**: a claim that made some node unavailable and is allocated but reserved for no
  pod (or only this one) is deallocated (``deallocation of ResourceClaim completed``), so the
  next attempt may allocate it elsewhere; otherwise ``still not schedulable``, and ``no new claims
  to deallocate`` for a pod without claims (which every FitError message ends with).
* **Score** (weight 2 in the default profile; PreScore skips it for a pod with nothing to
  allocate, where every node would score 0): a ``firstAvailable`` request scores
  ``8 - index`` of the subrequest allocated on that node (the first alternative scores most),
  normalised to 0..100.
* **Reserve** records the node's allocations as in flight (their devices are not given to
  another pod meanwhile); **Unreserve** drops them and releases a reservation PreBind made.
* **PreBind** adds the ``resource.kubernetes.io/delete-protection`` finalizer, then writes the
  allocation and the pod's ``reservedFor`` entry in one status write, re-reading the claim and
  retrying on a conflict; ``claim ns/c got allocated elsewhere in the meantime`` when another
  writer won (``binding.py``). Upstream has no PostBind.

Deviations: PostFilter's deallocation and Unreserve's release are sent in the background
(PostFilter and Unreserve are synchronous here): PostFilter reports the deallocation when it is
sent, and a failed write is logged, where upstream waits for it and fails the attempt. Score
matches each allocation result with the claim it was made for; upstream matches them by the
index among *all* the pod's claims, which fails the attempt with an error when an allocated
claim comes before an unallocated one (``docs/design/dra.md``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from ome_scheduler.api.core import Pod
from ome_scheduler.api.resource import (
    FINALIZER,
    FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE,
    AllocationResult,
    ResourceClaim,
)
from ome_scheduler.config.pluginargs import DynamicResourcesArgs
from ome_scheduler.dra.allocator import (
    AllocationError,
    AllocationTimedOut,
    Allocator,
    NodeAllocationFailed,
    SelectorCache,
)
from ome_scheduler.framework.events import (
    DEVICE_CLASS,
    NODE,
    POD,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    ActionType,
    ClusterEventWithHint,
    QueueingHint,
    on,
    queueing_hint,
)
from ome_scheduler.framework.interface import (
    ApiWriter,
    CycleState,
    FilterPlugin,
    FrameworkOptions,
    Handle,
    NodeToStatus,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.logs import get_logger
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.dynamicresources import binding
from ome_scheduler.plugins.dynamicresources.claims import ClaimError, claim_ref, is_reserved_for_pod, pod_claims
from ome_scheduler.plugins.dynamicresources.manager import DRAManager
from ome_scheduler.plugins.helper import default_normalize_score
from ome_scheduler.util.labels import NodeSelectorMatcher

log = get_logger()

_STATE = "DynamicResources"
MSG_CANNOT_ALLOCATE = "cannot allocate all claims"
MSG_NOT_AVAILABLE = "resourceclaim not available on the node"
MSG_TIMED_OUT = "timed out trying to allocate devices"
MSG_NO_CLAIMS = "no new claims to deallocate"
MSG_DEALLOCATED = "deallocation of ResourceClaim completed"
MSG_STILL = "still not schedulable"


class DRAHandle(Protocol):
    """The handle method DynamicResources needs besides :class:`Handle`."""

    def dra_manager(self) -> DRAManager:
        """The scheduler's DRA state (``Scheduler.dra_manager``)."""
        ...


@dataclass
class _State:
    """``stateData``: the pod's claims (1:1 with the ``spec.resourceClaims`` entries that name
    one), what PreFilter learned of them and what Filter and Reserve decided."""

    claims: list[ResourceClaim] = field(default_factory=list)
    allocator: Allocator | None = None
    to_allocate: list[int] = field(default_factory=list)
    """Indices into ``claims`` of the unallocated claims, in order (the allocator's claims)."""
    available_on: list[NodeSelectorMatcher | None] = field(default_factory=list)
    allocation: list[AllocationResult | None] = field(default_factory=list)
    """Set at Reserve for the claims the scheduler allocates, written at PreBind."""
    unavailable: set[int] = field(default_factory=set)
    node_allocations: dict[str, list[AllocationResult]] = field(default_factory=dict)


class DynamicResources(
    PreEnqueuePlugin,
    PreFilterPlugin,
    FilterPlugin,
    PostFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
    ReservePlugin,
    PreBindPlugin,
    SignPlugin,
):
    """Arguments: :class:`~ome_scheduler.config.pluginargs.DynamicResourcesArgs` (validated).

    ``client`` is the binding cycle's API writer (None when only checking a configuration:
    PreBind then fails with an error).
    """

    name = "DynamicResources"

    def __init__(self, handle: Handle, args: DynamicResourcesArgs | None = None, client: ApiWriter | None = None):
        self.handle = handle
        self.client = client
        self.filter_timeout = (args or DynamicResourcesArgs()).filter_timeout_seconds()
        self.selectors = SelectorCache()
        self._own_manager: DRAManager | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.metrics: Metrics | None = None
        """Where allocation conflicts are counted (set by :meth:`new`; None in unit tests)."""

    @classmethod
    def new(cls, args: DynamicResourcesArgs, handle: Handle, options: FrameworkOptions) -> DynamicResources:
        """``New``: the plugin for validated arguments, writing through ``options.api_writer``."""
        plugin = cls(handle, args, options.api_writer)
        plugin.metrics = options.metrics
        return plugin

    refuses_some = True

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: refuses a pod with resource claims; nothing to add otherwise."""
        if pod.pod.spec.resource_claims:
            return Status.unschedulable("pods with dra resource claims are not signable")
        return []

    @property
    def manager(self) -> DRAManager:
        """The handle's DRA manager, or one of the plugin's own when the handle has none (tests)."""
        fn = getattr(self.handle, "dra_manager", None)
        if fn is not None:
            m: DRAManager = fn()
            return m
        if self._own_manager is None:
            self._own_manager = DRAManager()
        return self._own_manager

    # ---- PreEnqueue -------------------------------------------------------------------------

    def pre_enqueue(self, pod: PodInfo) -> Status | None:
        """``PreEnqueue``: gate the pod while a claim is not created, missing or being deleted."""
        if not pod.pod.spec.resource_claims:
            return None
        try:
            pod_claims(pod.pod, self.manager.get_claim)
        except ClaimError as exc:
            return Status.unresolvable(str(exc))
        return None

    # ---- PreFilter --------------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """``PreFilter``: look the claims up, check classes and in-flight allocations, prepare the allocator."""
        s = _State()
        state.write(_STATE, s)
        if not pod.pod.spec.resource_claims:
            return None, Status(Code.SKIP)
        m = self.manager
        try:
            claims = [c for _, c in pod_claims(pod.pod, m.get_claim)]
        except ClaimError as exc:
            return None, Status.unresolvable(str(exc))
        if not claims:
            return None, Status(Code.SKIP)
        s.available_on = [None] * len(claims)
        s.allocation = [None] * len(claims)
        for i, claim in enumerate(claims):
            alloc = claim.status.allocation
            if alloc is not None:
                # CanBeReserved is always true in 1.35: an allocated claim never makes the pod wait here.
                if alloc.node_selector is not None:
                    s.available_on[i] = NodeSelectorMatcher.from_node_selector(alloc.node_selector)
                continue
            s.to_allocate.append(i)
            if m.claim_has_pending_allocation(claim.metadata.uid):
                return None, Status.unresolvable(
                    f"resource claim {claim_ref(claim)} is in the process of being allocated"
                )
            for request in claim.spec.devices.requests:
                if request.exactly is not None:
                    st = self._validate_class(request.exactly.device_class_name, request.name)
                elif request.first_available:
                    st = None
                    for sub in request.first_available:
                        st = self._validate_class(sub.device_class_name, f"{request.name}/{sub.name}")
                        if st is not None:
                            break
                else:
                    st = Status.unresolvable(
                        f"resource claim {claim_ref(claim)}, request {request.name}: unknown request type"
                    )
                if st is not None:
                    return None, st
        if s.to_allocate:
            s.allocator = Allocator(
                [claims[i] for i in s.to_allocate],
                m.list_all_allocated_devices(),
                m.device_class,
                m.resource_slices(),
                selectors=self.selectors,
            )
        s.claims = claims
        return None, None

    def _validate_class(self, class_name: str, request: str) -> Status | None:
        """``validateDeviceClass``."""
        if not class_name:
            return Status.as_error(RuntimeError(f"request {request}: unsupported request type"))
        if self.manager.device_class(class_name) is None:
            return Status.unresolvable(f"request {request}: device class {class_name} does not exist")
        return None

    # ---- Filter -----------------------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """``Filter``: allocated claims must reach the node, unallocated ones must fit on it."""
        s: _State | None = state.get(_STATE)
        if s is None:
            return Status(Code.ERROR, "not found")
        if not s.claims:
            return None
        unavailable = [
            i for i, sel in enumerate(s.available_on) if sel is not None and not sel.matches(node.name, node.labels)
        ]
        allocations: list[AllocationResult] | None = None
        if s.allocator is not None:
            deadline = time.monotonic() + self.filter_timeout if self.filter_timeout > 0 else None
            try:
                allocations = s.allocator.allocate(node.name, node.labels, deadline)
            except AllocationTimedOut:
                return Status.unresolvable(MSG_TIMED_OUT)
            except NodeAllocationFailed as exc:
                return Status.unresolvable(str(exc))
            except AllocationError as exc:
                return Status.as_error(exc)
            except Exception as exc:  # a bug must cost this pod's attempt, not the cycle's loop
                log.error("allocating devices failed", pod=pod.key, node=node.name, err=repr(exc))
                return Status.as_error(exc)
            if allocations is None or len(allocations) != len(s.to_allocate):
                return Status.unresolvable(MSG_CANNOT_ALLOCATE)
        if unavailable:
            s.unavailable.update(unavailable)
            return Status.unresolvable(MSG_NOT_AVAILABLE)
        if allocations is not None:
            s.node_allocations[node.name] = allocations
        return None

    # ---- PostFilter -------------------------------------------------------------------------

    def post_filter(self, state: CycleState, pod: PodInfo, statuses: NodeToStatus) -> Status | None:
        """``PostFilter``: deallocate a claim that is allocated where the pod cannot go and
        reserved for no other pod."""
        s: _State | None = state.get(_STATE)
        if s is None:
            return Status(Code.ERROR, "not found")
        if not s.claims:
            return Status.unschedulable(MSG_NO_CLAIMS)
        uid = pod.pod.metadata.uid
        for i in sorted(s.unavailable):
            claim = s.claims[i]
            reserved = claim.status.reserved_for
            if not reserved or (len(reserved) == 1 and reserved[0].uid == uid):
                log.info("Deallocation of ResourceClaim", v=5, pod=pod.key, resourceclaim=claim_ref(claim))
                if self.client is None:
                    return Status.as_error(RuntimeError("DynamicResources has no API client"))
                self._spawn(binding.deallocate(self.client, claim), f"deallocate {claim_ref(claim)}")
                return Status.unschedulable(MSG_DEALLOCATED)
        return Status.unschedulable(MSG_STILL)

    # ---- Score ------------------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status | None:
        """Skip Score when it would give every node 0: no claims, or none to allocate. (Upstream
        has no PreScore and scores 0; the Skip keeps the equivalence cache usable for pods without
        claims, ``framework/equivalence.py``.)"""
        s: _State | None = state.get(_STATE)
        if s is None or not s.claims or not s.to_allocate:
            return Status(Code.SKIP)
        return None

    def score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        """``Score``: the ``firstAvailable`` preference of each node's allocation."""
        s: _State | None = state.get(_STATE)
        if s is None or not s.claims:
            return [0] * len(nodes)
        claims = [s.claims[i] for i in s.to_allocate]
        out = []
        for n in nodes:
            allocs = s.node_allocations.get(n.name)
            out.append(0 if allocs is None else first_available_score(claims, allocs))
        return out

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        """``NormalizeScore``: ``DefaultNormalizeScore`` (the best node gets 100)."""
        default_normalize_score(scores, False)

    # ---- Reserve / Unreserve ----------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """``Reserve``: the node's allocations become in flight until PreBind writes them."""
        s: _State | None = state.get(_STATE)
        if s is None:
            return Status(Code.ERROR, "not found")
        if not s.claims or not s.to_allocate or s.allocator is None:
            return None
        allocs = s.node_allocations.get(node)
        if not allocs:
            return Status.as_error(RuntimeError("claim allocation not found for node"))
        if len(allocs) != len(s.to_allocate):
            return Status.as_error(
                RuntimeError(
                    f"internal error, have {len(allocs)} allocations, {len(s.to_allocate)} claims to allocate, "
                    f"want {len(s.to_allocate)} claims"
                )
            )
        m = self.manager
        for alloc, i in zip(allocs, s.to_allocate, strict=True):
            s.allocation[i] = alloc
            claim = s.claims[i]
            fins = claim.metadata.finalizers
            md = (
                claim.metadata
                if FINALIZER in fins
                else msgspec.structs.replace(claim.metadata, finalizers=[*fins, FINALIZER])
            )
            pending = msgspec.structs.replace(
                claim, metadata=md, status=msgspec.structs.replace(claim.status, allocation=alloc)
            )
            m.signal_claim_pending_allocation(claim.metadata.uid, pending)
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """``Unreserve``: drop in-flight allocations (restoring the cached claim) and release a
        reservation PreBind already wrote (in the background)."""
        s: _State | None = state.get(_STATE)
        if s is None or not s.claims:
            return
        m = self.manager
        for claim in s.claims:
            md = claim.metadata
            if m.remove_claim_pending_allocation(md.uid):
                m.assumed_claim_restore(md.namespace, md.name)
            if claim.status.allocation is not None and is_reserved_for_pod(pod.pod, claim) and self.client is not None:
                log.info("unreserve", v=5, resourceclaim=claim_ref(claim), pod=pod.key)
                self._spawn(binding.unreserve(self.client, claim, pod.pod), f"unreserve {claim_ref(claim)}")

    # ---- PreBind ----------------------------------------------------------------------------

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """``PreBindPreFlight``: Skip for a pod without claims, Success (PreBind writes or
        reserves them) otherwise; Error when PreFilter left no state."""
        s: _State | None = state.get(_STATE)
        if s is None:
            return Status(Code.ERROR, "not found")
        if not s.claims:
            return Status(Code.SKIP)
        return None

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status | None:
        """``PreBind``: write the allocations and reserve every claim for the pod."""
        s: _State | None = state.get(_STATE)
        if s is None:
            return Status(Code.ERROR, "not found")
        if not s.claims:
            return None
        for i, claim in enumerate(s.claims):
            if is_reserved_for_pod(pod.pod, claim):
                continue
            try:
                s.claims[i] = await self._bind_claim(claim, s.allocation[i], pod.pod)
            except Exception as exc:
                return Status.as_error(exc)
        return None

    async def _bind_claim(self, claim: ResourceClaim, allocation: AllocationResult | None, pod: Pod) -> ResourceClaim:
        """``bindClaim`` with its bookkeeping: the written claim is assumed in the cache, the
        in-flight allocation is dropped either way.

        Raises:
            binding.ClaimWriteError / RuntimeError: the write failed (upstream's message).
        """
        m = self.manager
        try:
            if self.client is None:
                raise RuntimeError("DynamicResources has no API client")
            if allocation is not None:
                self._check_devices_still_free(claim, allocation)
            try:
                updated = await binding.bind_claim(self.client, claim, allocation, pod)
            except binding.ClaimWriteError as exc:
                if self.metrics is not None and str(exc).endswith(binding.MSG_ALLOCATED_ELSEWHERE):
                    self.metrics.dra_allocation_conflicts.labels("claim").inc()
                raise
            try:
                m.assume_claim_after_api_call(updated)
            except (KeyError, ValueError) as exc:
                log.info("Claim not stored in assume cache", v=5, err=str(exc))
            return updated
        finally:
            if allocation is not None:
                m.remove_claim_pending_allocation(claim.metadata.uid)

    def _check_devices_still_free(self, claim: ResourceClaim, allocation: AllocationResult) -> None:
        """Just before the status write: no device of ``allocation`` may meanwhile be held by a
        cached claim (another scheduler, typically the default one, allocated it from the same
        pool). Counted in ``ome_scheduler_dra_allocation_conflicts_total{kind="device"}``.

        Raises:
            binding.ClaimWriteError: ``claim ns/c: device driver/pool/device got allocated to
                another claim in the meantime`` (an Error status: the pod is retried).
        """
        mine = [(r.driver, r.pool, r.device) for r in allocation.devices.results if not r.admin_access]
        taken = self.manager.held_by_cached_claims(mine)
        if not taken:
            return
        if self.metrics is not None:
            self.metrics.dra_allocation_conflicts.labels("device").inc()
        drv, pool, dev = taken[0]
        raise binding.ClaimWriteError(
            f"claim {claim_ref(claim)}: device {drv}/{pool}/{dev} got allocated to another claim in the meantime"
        )

    # ---- queueing -----------------------------------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """``EventsToRegister`` (queueing hints on): node add and label/allocatable changes, claim
        add/update, the pod's generated claims, device class and slice add/update."""
        return [
            on(NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_ALLOCATABLE),
            on(RESOURCE_CLAIM, ActionType.ADD | ActionType.UPDATE, self.is_schedulable_after_claim_change),
            on(POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM, self.is_schedulable_after_pod_change),
            on(DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE),
            on(RESOURCE_SLICE, ActionType.ADD | ActionType.UPDATE),
        ]

    @queueing_hint
    def is_schedulable_after_claim_change(
        self, pod: Pod, old: ResourceClaim | None, new: ResourceClaim | None
    ) -> QueueingHint:
        """``isSchedulableAfterClaimChange``: a claim of the pod appeared or its status changed,
        or any claim was deallocated (its devices are free)."""
        if new is None:
            return QueueingHint.QUEUE
        try:
            uses = any(c.metadata.uid == new.metadata.uid for _, c in pod_claims(pod, self.manager.get_claim))
        except ClaimError:
            return QueueingHint.QUEUE_SKIP
        if old is not None and old.status.allocation is not None and new.status.allocation is None:
            return QueueingHint.QUEUE
        if not uses:
            return QueueingHint.QUEUE_SKIP
        if old is None:
            return QueueingHint.QUEUE
        if old.status == new.status:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    @queueing_hint
    def is_schedulable_after_pod_change(self, pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
        """``isSchedulableAfterPodChange``: the pod's own ``resourceClaimStatuses`` now name
        every claim it waits for."""
        if new is None or new.metadata.uid != pod.metadata.uid:
            return QueueingHint.QUEUE_SKIP
        try:
            pod_claims(new, self.manager.get_claim)
        except ClaimError:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    # ---- background writes ------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        """Send a write in the background (PostFilter and Unreserve are synchronous); a failure
        is logged."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            log.error("DynamicResources write dropped: no event loop", what=what)
            return

        async def run() -> None:
            try:
                await coro
            except Exception as exc:
                log.error("DynamicResources write failed", what=what, err=str(exc))

        task = loop.create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self) -> None:
        """Wait for the background writes sent so far (tests, shutdown)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)


def first_available_score(claims: Sequence[ResourceClaim], allocations: Sequence[AllocationResult]) -> int:
    """``computeScore``: for every ``firstAvailable`` request, ``8 - i`` when its subrequest
    ``i`` was allocated (``FirstAvailableDeviceRequestMaxSize`` is 8)."""
    score = 0
    for claim, alloc in zip(claims, allocations, strict=False):
        subs = {r.request for r in alloc.devices.results if r.request.count("/") == 1}
        for request in claim.spec.devices.requests:
            if request.exactly is not None:
                continue
            for i, sub in enumerate(request.first_available):
                if f"{request.name}/{sub.name}" in subs:
                    score += FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE - i
    return score
