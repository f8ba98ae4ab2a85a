"""NodeUnschedulable: cordoned nodes only take pods that tolerate the unschedulable taint.

Mirrors ``pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go``: a node
with ``spec.unschedulable`` rejects a pod (UnschedulableAndUnresolvable,
``node(s) were unschedulable``) unless the pod tolerates
``node.kubernetes.io/unschedulable:NoSchedule``.
"""

from __future__ import annotations

from typing import Any

from ome_scheduler.api.core import Node, Pod, Taint
from ome_scheduler.framework.events import ClusterEventWithHint, QueueingHint, queueing_hint
from ome_scheduler.framework.interface import CycleState, FilterPlugin, SignFragment, SignPlugin
from ome_scheduler.framework.signers import TOLERATIONS_SIGNER, tolerations_signer
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.plugins.helper import taint_events, tolerations_tolerate_taint

ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
_UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")


def tolerates_unschedulable(pod: Pod) -> bool:
    """Whether the pod tolerates the ``node.kubernetes.io/unschedulable:NoSchedule`` taint."""
    return tolerations_tolerate_taint(pod.spec.tolerations, _UNSCHEDULABLE_TAINT)


class NodeUnschedulable(FilterPlugin, SignPlugin):
    """``NodeUnschedulable``: cordoned nodes (``spec.unschedulable``) only for pods that tolerate them."""

    name = "NodeUnschedulable"
    node_local_filter = True

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: the pod's tolerations (``TolerationsSigner``)."""
        return [(TOLERATIONS_SIGNER, tolerations_signer(pod.pod))]

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """UnschedulableAndUnresolvable ``node(s) were unschedulable`` on a cordoned node."""
        if node.unschedulable and not tolerates_unschedulable(pod.pod):
            return Status.unresolvable(ERR_REASON_UNSCHEDULABLE)
        return None

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """Node add/taint changes and the pod's own toleration changes."""
        return taint_events(self.is_schedulable_after_node_change, self.is_schedulable_after_pod_toleration_change)

    @staticmethod
    @queueing_hint
    def is_schedulable_after_node_change(pod: Pod, old: Node | None, new: Node | None) -> QueueingHint:
        """Queue when a node is added schedulable or stops being unschedulable."""
        if new is None:
            return QueueingHint.QUEUE
        if not new.spec.unschedulable:
            if old is None or old.spec.unschedulable:
                return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    @queueing_hint
    def is_schedulable_after_pod_toleration_change(pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
        """Queue when the pod itself now tolerates the unschedulable taint."""
        if new is not None and new.metadata.uid == pod.metadata.uid and tolerates_unschedulable(new):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
