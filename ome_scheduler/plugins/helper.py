"""Helpers shared by plugins.

Mirrors ``pkg/scheduler/framework/plugins/helper`` (``DefaultNormalizeScore``) and the
toleration helpers of ``k8s.io/api/core/v1/toleration.go`` and
``k8s.io/component-helpers/scheduling/corev1`` (``FindMatchingUntoleratedTaint``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ome_scheduler.api.core import Node, Pod, Taint, Toleration
from ome_scheduler.framework.events import NODE, POD, ActionType, ClusterEventWithHint, QueueingHintFn, on
from ome_scheduler.framework.interface import MAX_NODE_SCORE


def tolerates(t: Toleration, taint: Taint) -> bool:
    """``Toleration.ToleratesTaint``: effect and key match when set; Equal compares values."""
    if t.effect and t.effect != taint.effect:
        return False
    if t.key and t.key != taint.key:
        return False
    if t.operator in ("", "Equal"):
        return t.value == taint.value
    return t.operator == "Exists"


def tolerations_tolerate_taint(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """Whether any toleration tolerates ``taint`` (``v1helper.TolerationsTolerateTaint``)."""
    return any(tolerates(t, taint) for t in tolerations)


def find_untolerated_taint(
    taints: Sequence[Taint], tolerations: Sequence[Toleration], effects: tuple[str, ...] = ("NoSchedule", "NoExecute")
) -> Taint | None:
    """The first taint with one of ``effects`` that no toleration tolerates, else None."""
    for taint in taints:
        if taint.effect not in effects:
            continue
        if not tolerations_tolerate_taint(tolerations, taint):
            return taint
    return None


def default_normalize_score(scores: list[int], reverse: bool, max_priority: int = MAX_NODE_SCORE) -> None:
    """``helper.DefaultNormalizeScore``: scale to ``0..max_priority`` (integer division), optionally reversed."""
    # Whole-list assignments: this runs over the node window once per pod and plugin.
    max_count = max(scores, default=0)
    if max_count == 0:
        if reverse:
            scores[:] = [max_priority] * len(scores)
        return
    if reverse:
        scores[:] = [max_priority - max_priority * s // max_count for s in scores]
    elif max_count != max_priority:  # at max_priority the scale is the identity
        scores[:] = [max_priority * s // max_count for s in scores]


def taint_events(
    node_hint: QueueingHintFn[Node], toleration_hint: QueueingHintFn[Pod]
) -> list[ClusterEventWithHint[Any]]:
    """The registrations of plugins that read taints and tolerations (TaintToleration,
    NodeUnschedulable): node added or taints changed, and the pod's own toleration change."""
    return [
        on(NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT, node_hint),
        on(POD, ActionType.UPDATE_POD_TOLERATION, toleration_hint),
    ]
