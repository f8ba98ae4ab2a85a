"""SchedulingGates: a pod with ``spec.schedulingGates`` is not attempted until they are gone.

Mirrors ``pkg/scheduler/framework/plugins/schedulinggates/scheduling_gates.go``: PreEnqueue
returns UnschedulableAndUnresolvable ``waiting for scheduling gates: [a b]``; the pod stays
among the unschedulable pods (gated, no FailedScheduling event) until an update removes
every gate.
"""

from __future__ import annotations

from typing import Any

from ome_scheduler.api.core import Pod
from ome_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint
from ome_scheduler.framework.interface import PreEnqueuePlugin
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import PodInfo


class SchedulingGates(PreEnqueuePlugin):
    name = "SchedulingGates"

    def pre_enqueue(self, pod: PodInfo) -> Status | None:
        gates = pod.pod.spec.scheduling_gates
        if not gates:
            return None
        return Status.unresolvable(f"waiting for scheduling gates: [{' '.join(g.name for g in gates)}]")

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent("Pod", ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED), self._after_gates_removed
            )
        ]

    @staticmethod
    def _after_gates_removed(pod: Pod, old: Any, new: Any) -> QueueingHint:
        if isinstance(new, Pod) and new.metadata.uid == pod.metadata.uid:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
