"""SchedulingGates: a pod with ``spec.schedulingGates`` is not attempted until they are gone.

Mirrors ``pkg/scheduler/framework/plugins/schedulinggates/scheduling_gates.go``: PreEnqueue
returns UnschedulableAndUnresolvable ``waiting for scheduling gates: [a b]``; the pod stays
among the unschedulable pods (gated, no FailedScheduling event) until an update removes
every gate.
"""

from __future__ import annotations

from typing import Any

from ome_scheduler.api.core import Pod
from ome_scheduler.framework.events import ActionType, ClusterEventWithHint, QueueingHint, on, queueing_hint
from ome_scheduler.framework.interface import PreEnqueuePlugin
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import PodInfo


class SchedulingGates(PreEnqueuePlugin):
    """``SchedulingGates``: pods with ``spec.schedulingGates`` stay out of activeQ, unattempted."""

    name = "SchedulingGates"

    def pre_enqueue(self, pod: PodInfo) -> Status | None:
        """UnschedulableAndUnresolvable while the pod has scheduling gates."""
        gates = pod.pod.spec.scheduling_gates
        if not gates:
            return None
        return Status.unresolvable(f"waiting for scheduling gates: [{' '.join(g.name for g in gates)}]")

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """The pod's own gates being removed."""
        return [
            on(
                "Pod",
                ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
                self.is_schedulable_after_update_pod_scheduling_gates_eliminated,
            )
        ]

    @staticmethod
    @queueing_hint
    def is_schedulable_after_update_pod_scheduling_gates_eliminated(
        pod: Pod, old: Pod | None, new: Pod | None
    ) -> QueueingHint:
        """Queue when the pod itself lost its last scheduling gate."""
        if new is not None and new.metadata.uid == pod.metadata.uid:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
