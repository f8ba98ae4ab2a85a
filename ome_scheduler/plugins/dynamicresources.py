"""DynamicResources: present for kube-scheduler's messages; ResourceClaims are not supported.

Mirrors the parts of ``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``
that every pod meets, because DynamicResourceAllocation is GA (always on) in 1.35 and the
plugin is in the default profile (weight 2, just before DefaultPreemption):

* PreFilter records an empty state and returns Skip for a pod without ``resourceClaims``.
* PostFilter answers Unschedulable ``no new claims to deallocate`` when the state says the pod
  has no claims, so every FitError message ends with that sentence, as kube-scheduler's does;
  when PreFilter never ran (an earlier PreFilter plugin rejected the pod as unresolvable) the
  state is missing and the answer is the error ``not found``, which kube-scheduler also appends.

Deviation: a pod that references ResourceClaims is rejected in PreFilter
(UnschedulableAndUnresolvable, ``ome-scheduler does not support ResourceClaims``) instead of
being allocated devices (docs/plugins.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from ome_scheduler.framework.interface import CycleState, NodeToStatus, PostFilterPlugin, PreFilterPlugin
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo

_STATE = "DynamicResources"
ERR_UNSUPPORTED = "ome-scheduler does not support ResourceClaims"


class DynamicResources(PreFilterPlugin, PostFilterPlugin):
    """PreFilter and PostFilter only (no args)."""

    name = "DynamicResources"

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """Record whether the pod has claims; Skip when it has none, reject it when it has some."""
        claims = pod.pod.spec.resource_claims
        state.write(_STATE, len(claims))
        if not claims:
            return None, Status(Code.SKIP)
        return None, Status.unresolvable(ERR_UNSUPPORTED)

    def post_filter(self, state: CycleState, pod: PodInfo, statuses: NodeToStatus) -> Status | None:
        """``PostFilter``: ``no new claims to deallocate``, or the error ``not found`` without PreFilter state."""
        n = state.get(_STATE)
        if n is None:
            return Status(Code.ERROR, "not found")
        if n == 0:
            return Status.unschedulable("no new claims to deallocate")
        return Status.unschedulable()
