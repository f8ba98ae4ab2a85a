"""NodeResourcesFit: requests must fit the node's free allocatable; scoring by strategy.

Mirrors ``pkg/scheduler/framework/plugins/noderesources/fit.go``, ``resource_allocation.go``,
``most_allocated.go``, ``least_allocated.go`` and ``requested_to_capacity_ratio.go``:

* Filter: ``Too many pods`` when the node's pod slots are used up; ``Insufficient {r}`` for
  every requested resource (cpu in millicores, memory and ephemeral-storage in bytes,
  extended resources such as ``nvidia.com/gpu``) above free allocatable. The status is
  UnschedulableAndUnresolvable when a request exceeds the node's whole allocatable.
  The pod's requests are its spec's (``computePodResourceRequest``); the node's are what its
  pods count (``NodeInfo.requested``), which for a pod mid-resize is the max of its spec and
  its container statuses' ``resources.requests`` and ``allocatedResources``
  (``framework.types.pod_requests``).
* Score: per configured resource, ``requested = node's (non-zero) requests + pod's`` (the
  pod's with its status, ``UseStatusResources``);
  MostAllocated ``requested*100/allocatable``, LeastAllocated
  ``(allocatable-requested)*100/allocatable``, RequestedToCapacityRatio a broken linear
  function of utilisation; the weighted mean over resources the node has.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.config.pluginargs import MAX_CUSTOM_PRIORITY_SCORE, REQUESTED_TO_CAPACITY_RATIO, NodeResourcesFitArgs
from ome_scheduler.framework.events import ActionType, ClusterEventWithHint, QueueingHint, on, queueing_hint
from ome_scheduler.framework.interface import (
    MAX_NODE_SCORE,
    CycleState,
    FilterPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from ome_scheduler.framework.signers import RESOURCES_SIGNER
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    NodeInfo,
    PodInfo,
    Resource,
    is_extended_resource_name,
    is_scalar_resource_name,
    pod_requests,
    to_resource,
)

MAX_UTILIZATION = 100
_PRE_FILTER_STATE = "PreFilterNodeResourcesFit"


def insufficient_resources(
    req: Resource, node: NodeInfo, ignored: frozenset[str] = frozenset(), ignored_groups: frozenset[str] = frozenset()
) -> tuple[list[str], bool]:
    """``fitsRequest``: (reasons, unresolvable) for a pod request on a node."""
    reasons: list[str] = []
    unresolvable = False
    alloc = node.allocatable
    used = node.requested
    if len(node.pods) + 1 > alloc.allowed_pod_number:
        reasons.append("Too many pods")
    if req.milli_cpu == 0 and req.memory == 0 and req.ephemeral_storage == 0 and not req.scalar:
        return reasons, unresolvable
    if req.milli_cpu > 0 and req.milli_cpu > alloc.milli_cpu - used.milli_cpu:
        reasons.append("Insufficient cpu")
        unresolvable |= req.milli_cpu > alloc.milli_cpu
    if req.memory > 0 and req.memory > alloc.memory - used.memory:
        reasons.append("Insufficient memory")
        unresolvable |= req.memory > alloc.memory
    if req.ephemeral_storage > 0 and req.ephemeral_storage > alloc.ephemeral_storage - used.ephemeral_storage:
        reasons.append("Insufficient ephemeral-storage")
        unresolvable |= req.ephemeral_storage > alloc.ephemeral_storage
    for name, q in req.scalar.items():
        if q == 0:
            continue
        if (ignored or ignored_groups) and is_extended_resource_name(name):
            if name in ignored or name.split("/")[0] in ignored_groups:
                continue
        cap = alloc.scalar.get(name, 0)
        if q > cap - used.scalar.get(name, 0):
            reasons.append(f"Insufficient {name}")
            unresolvable |= q > cap
    return reasons, unresolvable


def fits(pod: PodInfo, node: NodeInfo) -> bool:
    """Whether the pod's requests fit the node now (``noderesources.Fits`` is empty)."""
    return not insufficient_resources(pod.requests, node)[0]


def _most(requested: int, capacity: int) -> int:
    if capacity == 0:
        return 0
    return min(requested, capacity) * MAX_NODE_SCORE // capacity


def _least(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def broken_linear(shape: Sequence[tuple[int, int]]) -> Any:
    """``helper.BuildBrokenLinearFunction`` over (utilization, score) points."""

    def f(p: int) -> int:
        for i, (u, s) in enumerate(shape):
            if p <= u:
                if i == 0:
                    return shape[0][1]
                u0, s0 = shape[i - 1]
                num = (s - s0) * (p - u0)
                den = u - u0
                q = abs(num) // den
                return s0 + (q if num >= 0 else -q)  # Go integer division truncates toward zero
        return shape[-1][1]

    return f


class NodeResourcesFit(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, SignPlugin):
    """Arguments: :class:`NodeResourcesFitArgs` (validated)."""

    name = "NodeResourcesFit"
    node_local_filter = True
    node_local_score = True

    def __init__(self, args: NodeResourcesFitArgs) -> None:
        ss = args.scoring_strategy
        self.strategy = ss.type
        self.resources = [(r.name, r.weight) for r in ss.resources]
        self.ignored = frozenset(args.ignored_resources)
        self.ignored_groups = frozenset(args.ignored_resource_groups)
        shape = ss.requested_to_capacity_ratio.shape
        scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
        self._shape_fn = (
            broken_linear([(p.utilization, p.score * scale) for p in shape])
            if shape and self.strategy == REQUESTED_TO_CAPACITY_RATIO
            else None
        )

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: the spec's requests with overhead (``computePodResourceRequest``; the
        DRAExtendedResource gate, which would refuse every pod, is off in 1.35)."""
        return [(RESOURCES_SIGNER, pod_requests(pod.pod, use_status=False))]

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """``computePodResourceRequest``: the spec's requests. ``pod.requests`` is that already
        unless a container status reports resources (then it is recomputed without them)."""
        if pod.status_resources:
            state.write(_PRE_FILTER_STATE, to_resource(pod_requests(pod.pod, use_status=False)))
        return None, None

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """``Insufficient {resource}`` (and ``Too many pods``) when the node's free allocatable is short."""
        req: Resource = state.read(_PRE_FILTER_STATE) if pod.status_resources else pod.requests
        reasons, unresolvable = insufficient_resources(req, node, self.ignored, self.ignored_groups)
        if not reasons:
            return None
        return Status.unresolvable(*reasons) if unresolvable else Status.unschedulable(*reasons)

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status | None:
        """Compute the requests the scoring strategy weighs once per cycle."""
        state.write("PreScoreNodeResourcesFit", self.pod_request_list(pod.pod))
        return None

    def pod_request_list(self, pod: Pod) -> list[int]:
        """``calculatePodResourceRequestList``: requests per configured resource (non-zero cpu/memory)."""
        reqs = pod_requests(pod, {"cpu": DEFAULT_MILLI_CPU_REQUEST, "memory": DEFAULT_MEMORY_REQUEST})
        return [reqs.get(name, 0) for name, _ in self.resources]

    def score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        """The strategy's score (LeastAllocated, MostAllocated or RequestedToCapacityRatio), 0..100."""
        pod_reqs: list[int] | None = state.get("PreScoreNodeResourcesFit")
        if pod_reqs is None:
            pod_reqs = self.pod_request_list(pod.pod)
        return [resource_score(self.strategy, self.resources, pod_reqs, n, self._shape_fn) for n in nodes]

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """Assigned pods deleted or scaled down, nodes added or resized."""
        return [
            on("Pod", ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN, self.is_schedulable_after_pod_event),
            on("Node", ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE, self.is_schedulable_after_node_change),
        ]

    @staticmethod
    @queueing_hint
    def is_schedulable_after_pod_event(pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
        """``isSchedulableAfterPodEvent``: Queue when a bound or nominated pod was deleted, the
        pod itself was scaled down, or a bound pod's requests (with its status, so an actuated or
        Infeasible resize counts) shrank in a resource the pod requests (cpu, memory,
        ephemeral-storage or a scalar resource)."""
        if new is None:
            if old is not None and not old.spec.node_name and not old.status.nominated_node_name:
                return QueueingHint.QUEUE_SKIP
            return QueueingHint.QUEUE
        if old is None:
            return QueueingHint.QUEUE
        if new.metadata.uid == pod.metadata.uid:
            return QueueingHint.QUEUE
        if not new.spec.node_name:
            return QueueingHint.QUEUE_SKIP
        before, after = to_resource(pod_requests(old)), to_resource(pod_requests(new))
        for name, v in pod_requests(pod).items():
            if not v:
                continue
            if name in ("cpu", "memory", "ephemeral-storage"):
                if before.get(name) > after.get(name):
                    return QueueingHint.QUEUE
            elif is_scalar_resource_name(name) and before.scalar.get(name, 0) > after.scalar.get(name, 0):
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    @queueing_hint
    def is_schedulable_after_node_change(pod: Pod, old: Node | None, new: Node | None) -> QueueingHint:
        """Queue when a node was added with room for the pod or grew a resource the pod requests
        (the pod's spec requests, as ``isFit`` and ``haveAnyRequestedResourcesIncreased``)."""
        if new is None:  # not registered for deletes; a deleted node frees nothing anyway
            return QueueingHint.QUEUE
        r = to_resource(pod_requests(pod, use_status=False))
        ni = NodeInfo(new.metadata.name)
        ni.set_node(new)
        if insufficient_resources(r, ni)[0]:
            return QueueingHint.QUEUE_SKIP
        if old is None:
            return QueueingHint.QUEUE
        o = Resource.from_list(old.status.allocatable)
        m = ni.allocatable
        if m.allowed_pod_number > o.allowed_pod_number:
            return QueueingHint.QUEUE
        if (
            (r.milli_cpu > 0 and m.milli_cpu > o.milli_cpu)
            or (r.memory > 0 and m.memory > o.memory)
            or (r.ephemeral_storage > 0 and m.ephemeral_storage > o.ephemeral_storage)
        ):
            return QueueingHint.QUEUE
        for name, q in r.scalar.items():
            if q and m.scalar.get(name, 0) > o.scalar.get(name, 0):
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP


def resource_score(
    strategy: str, resources: Sequence[tuple[str, int]], pod_reqs: Sequence[int], node: NodeInfo, shape_fn: Any = None
) -> int:
    """``resourceAllocationScorer.score`` for one node (integer, 0..100)."""
    alloc = node.allocatable
    nz = node.non_zero_requested
    req = node.requested
    score_sum = 0
    weight_sum = 0
    rtcr = strategy == "RequestedToCapacityRatio"
    for (name, weight), pr in zip(resources, pod_reqs, strict=True):
        if name == "cpu":
            a, r = alloc.milli_cpu, nz.milli_cpu + pr
        elif name == "memory":
            a, r = alloc.memory, nz.memory + pr
        elif name == "ephemeral-storage":
            a, r = alloc.ephemeral_storage, req.ephemeral_storage + pr
        else:
            if pr == 0 and is_scalar_resource_name(name):
                continue
            if name not in alloc.scalar:
                continue
            a, r = alloc.scalar[name], req.scalar.get(name, 0) + pr
        if a == 0:
            continue
        if strategy == "MostAllocated":
            s = _most(r, a)
        elif strategy == "LeastAllocated":
            s = _least(r, a)
        else:
            s = shape_fn(MAX_UTILIZATION if r > a else r * MAX_UTILIZATION // a)
            if s <= 0:
                continue
        score_sum += s * weight
        weight_sum += weight
    if weight_sum == 0:
        return 0
    if rtcr:
        return int(math.floor(score_sum / weight_sum + 0.5))
    return score_sum // weight_sum
