"""InterPodAffinity: required pod (anti-)affinity filters; preferred terms score.

Mirrors ``pkg/scheduler/framework/plugins/interpodaffinity/{filtering,scoring,plugin}.go``:

* PreFilter counts, per (topology key, value), existing pods matching the incoming pod's
  required affinity terms (all terms must match one pod) and anti-affinity terms, and the
  existing pods whose own required anti-affinity matches the incoming pod (symmetry).
  Namespace selectors are resolved against namespace labels first.
* Filter: ``node(s) didn't match pod affinity rules`` (UnschedulableAndUnresolvable),
  ``node(s) didn't match pod anti-affinity rules`` and
  ``node(s) didn't satisfy existing pods anti-affinity rules`` (Unschedulable). The first
  pod of a group may satisfy its own affinity when no pod matches anywhere.
* Score sums weights per topology value (preferred terms of both sides, and existing pods'
  required affinity with ``hardPodAffinityWeight``) and normalises min..max to 0..100.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.config.pluginargs import InterPodAffinityArgs
from ome_scheduler.framework.events import ActionType, ClusterEventWithHint, QueueingHint, on, queueing_hint
from ome_scheduler.framework.interface import (
    MAX_NODE_SCORE,
    CycleState,
    FilterPlugin,
    Handle,
    PreFilterExtensions,
    PreFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from ome_scheduler.framework.signers import LABELS_SIGNER
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import AffinityTerm, NodeInfo, PodInfo

ERR_REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
ERR_REASON_AFFINITY = "node(s) didn't match pod affinity rules"
ERR_REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
_PRE_FILTER = "PreFilterInterPodAffinity"
_PRE_SCORE = "PreScoreInterPodAffinity"

Pair = tuple[str, str]


def matches_all(terms: Sequence[AffinityTerm], pod: Pod) -> bool:
    """``podMatchesAllAffinityTerms``: at least one term, and every term matches the pod."""
    if not terms:
        return False
    return all(t.matches(pod, {}) for t in terms)


class _State:
    __slots__ = ("existing_anti", "affinity", "anti", "affinity_terms", "anti_terms", "pod")

    def __init__(self) -> None:
        self.existing_anti: dict[Pair, int] = {}
        self.affinity: dict[Pair, int] = {}
        self.anti: dict[Pair, int] = {}
        self.affinity_terms: tuple[AffinityTerm, ...] = ()
        self.anti_terms: tuple[AffinityTerm, ...] = ()
        self.pod: Pod | None = None

    def clone(self) -> _State:
        """``preFilterState.Clone``: the counts copied, the terms and the pod shared."""
        out = _State()
        out.existing_anti = dict(self.existing_anti)
        out.affinity = dict(self.affinity)
        out.anti = dict(self.anti)
        out.affinity_terms = self.affinity_terms
        out.anti_terms = self.anti_terms
        out.pod = self.pod
        return out

    def update_with_pod(self, other: PodInfo, labels: Mapping[str, str], ns_labels: Mapping[str, str], v: int) -> None:
        """``updateWithPod``: count ``other`` on a node with ``labels`` (``v`` 1) or not (-1);
        ``ns_labels`` are the incoming pod's namespace's labels."""
        if self.pod is None:
            return
        for t in other.required_anti_affinity_terms:
            if t.matches(self.pod, ns_labels):
                _update(self.existing_anti, labels, t.topology_key, v)
        if matches_all(self.affinity_terms, other.pod):
            for t in self.affinity_terms:
                _update(self.affinity, labels, t.topology_key, v)
        for t in self.anti_terms:
            if t.matches(other.pod, {}):
                _update(self.anti, labels, t.topology_key, v)


def _update(m: dict[Pair, int], labels: Mapping[str, str], key: str, v: int) -> None:
    """``topologyToMatchedTermCount.update``: add ``v``; an entry down to zero is deleted."""
    tv = labels.get(key)
    if tv is not None:
        p = (key, tv)
        n = m.get(p, 0) + v
        if n == 0:
            m.pop(p, None)
        else:
            m[p] = n


def _inc(m: dict[Pair, int], labels: Mapping[str, str], key: str, v: int = 1) -> None:
    tv = labels.get(key)
    if tv is not None:
        p = (key, tv)
        m[p] = m.get(p, 0) + v


class InterPodAffinity(PreFilterPlugin, PreFilterExtensions, FilterPlugin, PreScorePlugin, ScorePlugin, SignPlugin):
    """Arguments: :class:`InterPodAffinityArgs` (validated)."""

    name = "InterPodAffinity"

    def __init__(self, handle: Handle, args: InterPodAffinityArgs) -> None:
        self.handle = handle
        self.hard_weight = args.hard_pod_affinity_weight
        self.ignore_preferred_of_existing = args.ignore_preferred_terms_of_existing_pods

    refuses_some = True

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: refuses a pod with pod affinity or anti-affinity; else the pod's labels
        (other pods' terms may match them), or nothing with
        ``ignorePreferredTermsOfExistingPods``."""
        aff = pod.pod.spec.affinity
        if aff is not None and (aff.pod_affinity is not None or aff.pod_anti_affinity is not None):
            return Status.unschedulable("pods with InterPodAffinity are not signable")
        if self.ignore_preferred_of_existing:
            return []
        return [(LABELS_SIGNER, pod.pod.metadata.labels)]

    def _ns_labels(self, namespace: str) -> dict[str, str]:
        ns = self.handle.namespace(namespace)
        return dict(ns.metadata.labels) if ns is not None else {}

    def _merge_namespaces(self, terms: Sequence[AffinityTerm]) -> tuple[AffinityTerm, ...]:
        out = []
        for t in terms:
            if t.namespace_selector.is_empty() or t.namespace_selector.is_nothing():
                out.append(t)
                continue
            names = [n for n in self.handle.namespace_names() if t.namespace_selector.matches(self._ns_labels(n))]
            out.append(t.with_namespaces(names))
        return tuple(out)

    # ---- filtering --------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """Collect existing pods' anti-affinity and this pod's terms per topology value."""
        if pod.parse_error:
            return None, Status.unresolvable(f"parsing pod: {pod.parse_error}")
        s = _State()
        s.pod = pod.pod
        s.affinity_terms = self._merge_namespaces(pod.required_affinity_terms)
        s.anti_terms = self._merge_namespaces(pod.required_anti_affinity_terms)
        ns_labels = self._ns_labels(pod.namespace)
        # Upstream walks every pod with required anti-affinity, and every pod for the incoming
        # pod's own terms; the handle's label indexes hand us a superset of the matches.
        for t, n in self.handle.anti_affinity_terms_for(pod.pod.metadata.labels):
            if t.matches(pod.pod, ns_labels):
                _inc(s.existing_anti, n.labels, t.topology_key)
        if s.affinity_terms:
            # A pod matching every term is a candidate of any one term: use an indexed one.
            lead = next((t for t in s.affinity_terms if t.selector.required_pair() is not None), s.affinity_terms[0])
            for ep, n in self.handle.pods_for_selector(lead.selector):
                if matches_all(s.affinity_terms, ep.pod):
                    for t in s.affinity_terms:
                        _inc(s.affinity, n.labels, t.topology_key)
        for t in s.anti_terms:
            for ep, n in self.handle.pods_for_selector(t.selector):
                if t.matches(ep.pod, {}):
                    _inc(s.anti, n.labels, t.topology_key)
        if not s.existing_anti and not s.affinity_terms and not s.anti_terms:
            return None, Status(Code.SKIP)
        state.write(_PRE_FILTER, s)
        return None, None

    def add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo, node: NodeInfo) -> Status | None:
        """``AddPod``: count ``to_add`` (a nominated pod, or a reprieved victim) on ``node``.

        Raises:
            KeyError: PreFilter wrote no state (upstream's ``error reading ... from cycleState``).
        """
        s: _State = state.read(_PRE_FILTER)
        s.update_with_pod(to_add, node.labels, self._ns_labels(pod.namespace), 1)
        return None

    def remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node: NodeInfo) -> Status | None:
        """``RemovePod``: stop counting ``to_remove`` (a preemption victim) on ``node``.

        Raises:
            KeyError: PreFilter wrote no state.
        """
        s: _State = state.read(_PRE_FILTER)
        s.update_with_pod(to_remove, node.labels, self._ns_labels(pod.namespace), -1)
        return None

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """Reject nodes that break the pod's affinity, anti-affinity, or existing pods' anti-affinity."""
        s: _State = state.read(_PRE_FILTER)
        labels = node.labels
        if s.affinity_terms:
            exist = True
            for t in s.affinity_terms:
                tv = labels.get(t.topology_key)
                if tv is None:
                    return Status.unresolvable(ERR_REASON_AFFINITY)
                if s.affinity.get((t.topology_key, tv), 0) <= 0:
                    exist = False
            if not exist and not (not s.affinity and s.pod is not None and matches_all(s.affinity_terms, s.pod)):
                return Status.unresolvable(ERR_REASON_AFFINITY)
        if s.anti:
            for t in s.anti_terms:
                tv = labels.get(t.topology_key)
                if tv is not None and s.anti.get((t.topology_key, tv), 0) > 0:
                    return Status.unschedulable(ERR_REASON_ANTI_AFFINITY)
        if s.existing_anti:
            for k, v in labels.items():
                if s.existing_anti.get((k, v), 0) > 0:
                    return Status.unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY)
        return None

    # ---- scoring ----------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status | None:
        """Sum the preferred (anti-)affinity weights per topology value; Skip when none apply."""
        has_constraints = bool(pod.preferred_affinity_terms or pod.preferred_anti_affinity_terms)
        if self.ignore_preferred_of_existing and not has_constraints:
            return Status(Code.SKIP)
        pref = self._merge_namespaces(pod.preferred_affinity_terms)
        pref_anti = self._merge_namespaces(pod.preferred_anti_affinity_terms)
        ns_labels = self._ns_labels(pod.namespace)
        scores: dict[str, dict[str, int]] = {}

        def add(
            term: AffinityTerm, weight: int, target: Pod, nsl: Mapping[str, str], labels: Mapping[str, str]
        ) -> None:
            if term.matches(target, nsl):
                tv = labels.get(term.topology_key)
                if tv is not None:
                    d = scores.setdefault(term.topology_key, {})
                    d[tv] = d.get(tv, 0) + weight

        # Upstream walks HavePodsWithAffinityList when the pod has no terms of its own; only
        # existing pods with required affinity or preferred terms can add anything then, and
        # the handle lists exactly those.
        pairs: Iterable[tuple[PodInfo, NodeInfo]]
        if has_constraints:
            pairs = ((ep, n) for n in self.handle.node_infos() for ep in n.pods.values())
        else:
            pairs = self.handle.pods_with_affinity_score_terms()
        for ep, n in pairs:
            labels = n.labels
            if not labels:
                continue
            for t in pref:
                add(t, t.weight, ep.pod, {}, labels)
            for t in pref_anti:
                add(t, -t.weight, ep.pod, {}, labels)
            if self.hard_weight > 0:
                for t in ep.required_affinity_terms:
                    add(t, self.hard_weight, pod.pod, ns_labels, labels)
            if not self.ignore_preferred_of_existing:
                for t in ep.preferred_affinity_terms:
                    add(t, t.weight, pod.pod, ns_labels, labels)
                for t in ep.preferred_anti_affinity_terms:
                    add(t, -t.weight, pod.pod, ns_labels, labels)
        if not scores:
            return Status(Code.SKIP)
        state.write(_PRE_SCORE, scores)
        return None

    def score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        """Raw score: the summed weights of the node's topology values (may be negative)."""
        scores: dict[str, dict[str, int]] = state.read(_PRE_SCORE)
        out = []
        for n in nodes:
            total = 0
            for key, values in scores.items():
                v = n.labels.get(key)
                if v is not None:
                    total += values.get(v, 0)
            out.append(total)
        return out

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        """Scale raw scores into 0..100 between the lowest and highest."""
        if not state.get(_PRE_SCORE) or not scores:
            return
        lo, hi = min(scores), max(scores)
        diff = hi - lo
        for i, sc in enumerate(scores):
            scores[i] = int(MAX_NODE_SCORE * ((sc - lo) / diff)) if diff > 0 else 0

    # ---- queueing hints ---------------------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """Pod add/label/delete and node add/label changes."""
        return [
            on(
                "Pod",
                ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE,
                self.is_schedulable_after_pod_change,
            ),
            on("Node", ActionType.ADD | ActionType.UPDATE_NODE_LABEL, self.is_schedulable_after_node_change),
        ]

    @staticmethod
    @queueing_hint
    def is_schedulable_after_pod_change(pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
        """Queue when an assigned pod now matches the pod's affinity or stopped matching its anti-affinity."""
        o, m = old, new
        if (m is not None and not m.spec.node_name) or (o is not None and not o.spec.node_name):
            return QueueingHint.QUEUE_SKIP
        pi = PodInfo(pod)
        terms, anti = pi.required_affinity_terms, pi.required_anti_affinity_terms
        if m is not None and o is not None:
            if not matches_all(terms, o) and matches_all(terms, m):
                return QueueingHint.QUEUE
            if matches_all(anti, o) and not matches_all(anti, m):
                return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        if m is not None:
            return QueueingHint.QUEUE if matches_all(terms, m) else QueueingHint.QUEUE_SKIP
        if o is not None:
            return QueueingHint.QUEUE if matches_all(anti, o) else QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    @staticmethod
    @queueing_hint
    def is_schedulable_after_node_change(pod: Pod, old: Node | None, new: Node | None) -> QueueingHint:
        """Queue when a node gained or changed a topology label the pod's required (anti-)affinity uses."""
        if new is None:
            return QueueingHint.QUEUE
        pi = PodInfo(pod)
        o = old.metadata.labels if old is not None else None
        m = new.metadata.labels
        for t in pi.required_affinity_terms:
            if o is None:
                if t.topology_key in m:
                    return QueueingHint.QUEUE
                continue
            if t.topology_key not in o and t.topology_key in m:
                return QueueingHint.QUEUE
            if t.topology_key in o and t.topology_key in m and o[t.topology_key] != m[t.topology_key]:
                return QueueingHint.QUEUE
        for t in pi.required_anti_affinity_terms:
            if o is None:
                return QueueingHint.QUEUE
            if t.topology_key in o and t.topology_key not in m:
                return QueueingHint.QUEUE
            if t.topology_key in o and t.topology_key in m and o[t.topology_key] != m[t.topology_key]:
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
