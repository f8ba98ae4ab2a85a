"""NodeName: a pod with ``spec.nodeName`` only fits that node.

Mirrors ``pkg/scheduler/framework/plugins/nodename/node_name.go``.
"""

from __future__ import annotations

from typing import Any

from ome_scheduler.framework.events import ActionType, ClusterEventWithHint, on
from ome_scheduler.framework.interface import CycleState, FilterPlugin, SignFragment, SignPlugin
from ome_scheduler.framework.signers import NODE_NAME_SIGNER
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import NodeInfo, PodInfo

ERR_REASON = "node(s) didn't match the requested node name"


class NodeName(FilterPlugin, SignPlugin):
    """``NodeName``: a pod with ``spec.nodeName`` fits only that node."""

    name = "NodeName"
    node_local_filter = True

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: the pod's ``spec.nodeName``."""
        return [(NODE_NAME_SIGNER, pod.pod.spec.node_name)]

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """UnschedulableAndUnresolvable on every node other than ``spec.nodeName``."""
        want = pod.pod.spec.node_name
        if want and want != node.name:
            return Status.unresolvable(ERR_REASON)
        return None

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """Node Add with no hint (always Queue), as upstream registers it."""
        return [on("Node", ActionType.ADD)]
