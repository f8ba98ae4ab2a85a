"""NodeUnschedulable: cordoned nodes only take pods that tolerate the unschedulable taint.

Mirrors ``pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go``: a node
with ``spec.unschedulable`` rejects a pod (UnschedulableAndUnresolvable,
``node(s) were unschedulable``) unless the pod tolerates
``node.kubernetes.io/unschedulable:NoSchedule``.
"""

from __future__ import annotations

from typing import Any

from ome_scheduler.api.core import Node, Pod, Taint
from ome_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint
from ome_scheduler.framework.interface import CycleState, FilterPlugin
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.plugins.helper import tolerations_tolerate_taint

ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
_UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")


def tolerates_unschedulable(pod: Pod) -> bool:
    return tolerations_tolerate_taint(pod.spec.tolerations, _UNSCHEDULABLE_TAINT)


class NodeUnschedulable(FilterPlugin):
    name = "NodeUnschedulable"
    node_local_filter = True

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        if node.unschedulable and not tolerates_unschedulable(pod.pod):
            return Status.unresolvable(ERR_REASON_UNSCHEDULABLE)
        return None

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE_NODE_TAINT), self._after_node),
            ClusterEventWithHint(ClusterEvent("Pod", ActionType.UPDATE_POD_TOLERATION), self._after_toleration),
        ]

    @staticmethod
    def _after_node(pod: Pod, old: Any, new: Any) -> QueueingHint:
        if not isinstance(new, Node):
            return QueueingHint.QUEUE
        if not new.spec.unschedulable:
            if old is None or (isinstance(old, Node) and old.spec.unschedulable):
                return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP if old is not None else QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    def _after_toleration(pod: Pod, old: Any, new: Any) -> QueueingHint:
        if isinstance(new, Pod) and new.metadata.uid == pod.metadata.uid and tolerates_unschedulable(new):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
