"""NodePorts: a pod's host ports must be free on the node.

Mirrors ``pkg/scheduler/framework/plugins/nodeports/node_ports.go``: PreFilter skips pods
without host ports (sidecar init containers included); Filter rejects with Unschedulable
``node(s) didn't have free ports for the requested pod ports``; 0.0.0.0 conflicts with
every address.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ome_scheduler.api.core import Pod
from ome_scheduler.framework.events import ActionType, ClusterEventWithHint, QueueingHint, on, queueing_hint
from ome_scheduler.framework.interface import CycleState, FilterPlugin, PreFilterPlugin, SignFragment, SignPlugin
from ome_scheduler.framework.signers import HOST_PORTS_SIGNER, host_ports_signer
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import HostPortInfo, NodeInfo, PodInfo

ERR_REASON = "node(s) didn't have free ports for the requested pod ports"


class NodePorts(PreFilterPlugin, FilterPlugin, SignPlugin):
    """``NodePorts``: host ports (sidecars' included) must be free on the node."""

    name = "NodePorts"
    node_local_filter = True

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: the pod's host ports (``HostPortsSigner``)."""
        return [(HOST_PORTS_SIGNER, host_ports_signer(pod.pod))]

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """Skip pods without host ports; otherwise record their ports in CycleState."""
        if not pod.host_ports:
            return None, Status(Code.SKIP)
        return None, None

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """Unschedulable when any host port conflicts with one in use on the node."""
        used = node.used_ports
        for ip, proto, port in pod.host_ports:
            if used.conflicts(ip, proto, port):
                return Status.unschedulable(ERR_REASON)
        return None

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """Assigned pods deleted (ports freed) and nodes added."""
        return [on("Pod", ActionType.DELETE, self.is_schedulable_after_pod_deleted), on("Node", ActionType.ADD)]

    @staticmethod
    @queueing_hint
    def is_schedulable_after_pod_deleted(pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
        """Queue when a deleted (assigned or nominated) pod frees a host port the pod asks for."""
        if old is None:
            return QueueingHint.QUEUE
        if not old.spec.node_name and not old.status.nominated_node_name:
            return QueueingHint.QUEUE_SKIP
        deleted = PodInfo(old).host_ports
        if not deleted:
            return QueueingHint.QUEUE_SKIP
        in_use = HostPortInfo()
        for ip, proto, port in deleted:
            in_use.add(ip, proto, port)
        for ip, proto, port in PodInfo(pod).host_ports:
            if in_use.conflicts(ip, proto, port):
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
