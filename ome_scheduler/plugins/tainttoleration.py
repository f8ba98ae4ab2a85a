"""TaintToleration: NoSchedule/NoExecute taints must be tolerated; PreferNoSchedule scores.

Mirrors ``pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go``: Filter
rejects with UnschedulableAndUnresolvable ``node(s) had untolerated taint(s)``; Score
counts intolerable PreferNoSchedule taints and NormalizeScore reverses them, so nodes with
fewer such taints score higher.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.framework.events import ClusterEventWithHint, QueueingHint, queueing_hint
from ome_scheduler.framework.interface import (
    CycleState,
    FilterPlugin,
    PreScorePlugin,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from ome_scheduler.framework.signers import TOLERATIONS_SIGNER, tolerations_signer
from ome_scheduler.framework.status import Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.plugins.helper import (
    default_normalize_score,
    find_untolerated_taint,
    taint_events,
    tolerations_tolerate_taint,
)

ERR_REASON = "node(s) had untolerated taint(s)"
_STATE = "PreScoreTaintToleration"


class TaintToleration(FilterPlugin, PreScorePlugin, ScorePlugin, SignPlugin):
    """``TaintToleration``: NoSchedule/NoExecute taints filter; PreferNoSchedule taints score."""

    name = "TaintToleration"
    node_local_filter = True
    node_local_score = True

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: the pod's tolerations (``TolerationsSigner``)."""
        return [(TOLERATIONS_SIGNER, tolerations_signer(pod.pod))]

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """Rejects a node with a NoSchedule or NoExecute taint the pod does not tolerate."""
        if node.taints and find_untolerated_taint(node.taints, pod.pod.spec.tolerations) is not None:
            return Status.unresolvable(ERR_REASON)
        return None

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status | None:
        """Skip when no node has a PreferNoSchedule taint (nothing to score)."""
        state.write(_STATE, [t for t in pod.pod.spec.tolerations if not t.effect or t.effect == "PreferNoSchedule"])
        return None

    def score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        """Raw score: the number of PreferNoSchedule taints the pod does not tolerate."""
        tolerations = state.get(_STATE)
        if tolerations is None:
            tolerations = [t for t in pod.pod.spec.tolerations if not t.effect or t.effect == "PreferNoSchedule"]
        out = []
        for n in nodes:
            c = 0
            for taint in n.taints:
                if taint.effect == "PreferNoSchedule" and not tolerations_tolerate_taint(tolerations, taint):
                    c += 1
            out.append(c)
        return out

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        """Fewer intolerable taints score higher (reverse normalisation to 0..100)."""
        default_normalize_score(scores, reverse=True)

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """A node added or re-tainted may now be tolerated; so may the pod after changing its tolerations."""
        return taint_events(self.is_schedulable_after_node_change, self.is_schedulable_after_pod_toleration_change)

    @staticmethod
    @queueing_hint
    def is_schedulable_after_pod_toleration_change(pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
        """Queue when the pod itself changed its tolerations."""
        if new is not None and new.metadata.uid == pod.metadata.uid:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    @queueing_hint
    def is_schedulable_after_node_change(pod: Pod, old: Node | None, new: Node | None) -> QueueingHint:
        """Queue when the node's taints became tolerated by the pod (or a tolerated node was added)."""
        if new is None:
            return QueueingHint.QUEUE
        was = True
        if old is not None:
            was = find_untolerated_taint(old.spec.taints, pod.spec.tolerations) is not None
        now = find_untolerated_taint(new.spec.taints, pod.spec.tolerations) is not None
        return QueueingHint.QUEUE if was and not now else QueueingHint.QUEUE_SKIP
