"""NodeAffinity: ``nodeSelector`` and required node affinity filter; preferred terms score.

Mirrors ``pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go``: PreFilter skips
pods without node constraints, narrows to node names when every required term carries a
``metadata.name In`` field requirement (``pod affinity terms conflict`` when they exclude
each other); Filter rejects with UnschedulableAndUnresolvable
``node(s) didn't match Pod's node affinity/selector`` (or, for the profile's
``addedAffinity``, ``node(s) didn't match scheduler-enforced node affinity``); Score sums
the weights of matching preferred terms and normalises to 0..100.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ome_scheduler.api.core import Node, Pod, PreferredSchedulingTerm
from ome_scheduler.config.pluginargs import NodeAffinityArgs
from ome_scheduler.framework.events import ActionType, ClusterEventWithHint, QueueingHint, on, queueing_hint
from ome_scheduler.framework.interface import (
    CycleState,
    FilterPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from ome_scheduler.framework.signers import NODE_AFFINITY_SIGNER, NODE_SELECTOR_SIGNER, node_affinity_signer
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.plugins.helper import default_normalize_score
from ome_scheduler.util.labels import NodeSelectorMatcher, compile_term, term_matches

ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
ERR_REASON_CONFLICT = "pod affinity terms conflict"


def required_matches(pod: PodInfo | Pod, name: str, labels: Mapping[str, str]) -> bool:
    """``GetRequiredNodeAffinity(pod).Match``: nodeSelector and required terms both hold."""
    p = pod.pod if isinstance(pod, PodInfo) else pod
    for k, v in p.spec.node_selector.items():
        if labels.get(k) != v:
            return False
    if isinstance(pod, PodInfo):
        matcher = pod.node_selector_matcher
    else:
        aff = p.spec.affinity
        na = aff.node_affinity if aff is not None else None
        req = na.required_during_scheduling_ignored_during_execution if na is not None else None
        matcher = NodeSelectorMatcher.from_node_selector(req) if req is not None else None
    return matcher is None or matcher.matches(name, labels)


class PreferredTerms:
    """``nodeaffinity.PreferredSchedulingTerms``: weighted terms; a node scores the sum it matches."""

    def __init__(self, terms: Sequence[PreferredSchedulingTerm]) -> None:
        self.terms = [(t.weight, *compile_term(t.preference)) for t in terms if t.weight != 0]

    def score(self, name: str, labels: Mapping[str, str]) -> int:
        """Sum of the weights of the terms that match the node."""
        return sum(w for w, exprs, fields in self.terms if term_matches(exprs, fields, name, labels))


class NodeAffinity(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, SignPlugin):
    """``NodeAffinity``: ``nodeSelector``, required and preferred node affinity, ``addedAffinity``."""

    name = "NodeAffinity"
    node_local_filter = True
    node_local_score = True

    def __init__(self, args: NodeAffinityArgs) -> None:
        added = args.added_affinity
        self.added_selector: NodeSelectorMatcher | None = None
        self.added_preferred: PreferredTerms | None = None
        if added.required_during_scheduling_ignored_during_execution is not None:
            self.added_selector = NodeSelectorMatcher.from_node_selector(
                added.required_during_scheduling_ignored_during_execution
            )
        if added.preferred_during_scheduling_ignored_during_execution:
            self.added_preferred = PreferredTerms(added.preferred_during_scheduling_ignored_during_execution)

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: the pod's node affinity (``NodeAffinitySigner``) and node selector."""
        return [
            (NODE_AFFINITY_SIGNER, node_affinity_signer(pod.pod)),
            (NODE_SELECTOR_SIGNER, pod.pod.spec.node_selector),
        ]

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """Narrow to the nodes named by ``matchFields metadata.name``; Skip pods without constraints."""
        aff = pod.pod.spec.affinity
        na = aff.node_affinity if aff is not None else None
        req = na.required_during_scheduling_ignored_during_execution if na is not None else None
        if req is None and self.added_selector is None and not pod.pod.spec.node_selector:
            return None, Status(Code.SKIP)
        if req is None or not req.node_selector_terms:
            return None, None
        names: set[str] | None = None
        for t in req.node_selector_terms:
            term_names: set[str] | None = None
            for r in t.match_fields:
                if r.key == "metadata.name" and r.operator == "In":
                    s = set(r.values)
                    term_names = s if term_names is None else term_names & s
            if term_names is None:
                return None, None
            names = term_names if names is None else names | term_names
        if names is not None and not names:
            return None, Status.unresolvable(ERR_REASON_CONFLICT)
        return names, None

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """UnschedulableAndUnresolvable when the node misses the selector or required terms."""
        if self.added_selector is not None and not self.added_selector.matches(node.name, node.labels):
            return Status.unresolvable(ERR_REASON_ENFORCED)
        if not required_matches(pod, node.name, node.labels):
            return Status.unresolvable(ERR_REASON_POD)
        return None

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status | None:
        """Parse the preferred terms once per cycle; Skip when there are none."""
        aff = pod.pod.spec.affinity
        na = aff.node_affinity if aff is not None else None
        pref = na.preferred_during_scheduling_ignored_during_execution if na is not None else []
        if not pref and self.added_preferred is None:
            return Status(Code.SKIP)
        state.write("PreScoreNodeAffinity", PreferredTerms(pref) if pref else None)
        return None

    def score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        """Raw score: the summed weight of matching preferred terms."""
        terms: PreferredTerms | None = state.get("PreScoreNodeAffinity")
        out = []
        for n in nodes:
            c = 0
            if self.added_preferred is not None:
                c += self.added_preferred.score(n.name, n.labels)
            if terms is not None:
                c += terms.score(n.name, n.labels)
            out.append(c)
        return out

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        """Scale to 0..100 by the highest raw score."""
        default_normalize_score(scores, reverse=False)

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """Node add and label changes."""
        return [on("Node", ActionType.ADD | ActionType.UPDATE_NODE_LABEL, self.is_schedulable_after_node_change)]

    @queueing_hint
    def is_schedulable_after_node_change(self, pod: Pod, old: Node | None, new: Node | None) -> QueueingHint:
        """Queue when a node now matches the pod's (and the profile's) required node affinity and did not before."""
        if new is None:
            return QueueingHint.QUEUE
        md = new.metadata
        if self.added_selector is not None and not self.added_selector.matches(md.name, md.labels):
            return QueueingHint.QUEUE_SKIP
        if not required_matches(pod, md.name, md.labels):
            return QueueingHint.QUEUE_SKIP
        if old is None:
            return QueueingHint.QUEUE
        if required_matches(pod, old.metadata.name, old.metadata.labels):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE
