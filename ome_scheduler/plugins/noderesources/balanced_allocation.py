"""NodeResourcesBalancedAllocation: prefer nodes whose resource usage stays balanced.

Mirrors ``pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go`` and the
shared ``resource_allocation.go``: per configured resource (default cpu and memory, weight
must be 1) the fraction ``(node requested + pod requested) / allocatable`` capped at 1, using
the *actual* requests (no 100m/200Mi defaults); the score is ``(1 - std) * 100`` where std is
half the absolute difference for two resources and the population standard deviation for
more. PreScore skips best-effort pods (all requests zero).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ome_scheduler.config.pluginargs import NodeResourcesBalancedAllocationArgs
from ome_scheduler.framework.interface import (
    MAX_NODE_SCORE,
    CycleState,
    PreScorePlugin,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from ome_scheduler.framework.signers import RESOURCES_SIGNER
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo, is_scalar_resource_name, pod_requests

_STATE = "PreScoreNodeResourcesBalancedAllocation"


def balanced_score(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """``balancedResourceScorer`` over parallel lists (resources with 0 allocatable skipped)."""
    fractions: list[float] = []
    total = 0.0
    for r, a in zip(requested, allocatable, strict=True):
        if a == 0:
            continue
        f = min(r / a, 1.0)
        total += f
        fractions.append(f)
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = total / len(fractions)
        std = math.sqrt(sum((f - mean) * (f - mean) for f in fractions) / len(fractions))
    return int((1 - std) * MAX_NODE_SCORE)


def allocatable_and_requested(node: NodeInfo, name: str, pod_request: int) -> tuple[int, int]:
    """``calculateResourceAllocatableRequest`` with ``useRequested``: (allocatable, requested)."""
    if pod_request == 0 and is_scalar_resource_name(name):
        return 0, 0
    alloc = node.allocatable
    req = node.requested
    if name == "cpu":
        return alloc.milli_cpu, req.milli_cpu + pod_request
    if name == "memory":
        return alloc.memory, req.memory + pod_request
    if name == "ephemeral-storage":
        return alloc.ephemeral_storage, req.ephemeral_storage + pod_request
    if name in alloc.scalar:
        return alloc.scalar[name], req.scalar.get(name, 0) + pod_request
    return 0, 0


class NodeResourcesBalancedAllocation(PreScorePlugin, ScorePlugin, SignPlugin):
    """Arguments: :class:`NodeResourcesBalancedAllocationArgs` (validated)."""

    name = "NodeResourcesBalancedAllocation"
    node_local_filter = True
    node_local_score = True

    def __init__(self, args: NodeResourcesBalancedAllocationArgs) -> None:
        self.resources = [r.name for r in args.resources]

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: the spec's requests with overhead (``computePodResourceRequest``; the
        DRAExtendedResource gate, which would refuse every pod, is off in 1.35)."""
        return [(RESOURCES_SIGNER, pod_requests(pod.pod, use_status=False))]

    def pod_request_list(self, pi: PodInfo) -> list[int]:
        """``calculatePodResourceRequestList`` with ``useRequested``: actual requests, no defaults."""
        reqs = pod_requests(pi.pod)
        return [reqs.get(name, 0) for name in self.resources]

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status | None:
        """Skip best-effort pods; otherwise store the pod's requests (same order as ``resources``)."""
        reqs = self.pod_request_list(pod)
        if not any(reqs):
            return Status(Code.SKIP)
        state.write(_STATE, reqs)
        return None

    def score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        """``Score`` per node: ``(1 - std of usage fractions) * 100``."""
        reqs: list[int] | None = state.get(_STATE)
        if reqs is None:
            reqs = self.pod_request_list(pod)
            if not any(reqs):
                return [0] * len(nodes)
        out = []
        for n in nodes:
            requested: list[int] = []
            allocatable: list[int] = []
            for name, pr in zip(self.resources, reqs, strict=True):
                a, r = allocatable_and_requested(n, name, pr)
                allocatable.append(a)
                requested.append(r if a else 0)
            out.append(balanced_score(requested, allocatable))
        return out
