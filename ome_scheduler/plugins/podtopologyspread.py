"""PodTopologySpread: keep matching pods spread evenly over topology domains.

Mirrors ``pkg/scheduler/framework/plugins/podtopologyspread/{common,filtering,scoring,plugin}.go``
(v1.35.4, MatchLabelKeysInPodTopologySpread and NodeInclusionPolicyInPodTopologySpread on):

* Constraints come from ``spec.topologySpreadConstraints`` (``DoNotSchedule`` ones for the
  filter, ``ScheduleAnyway`` ones for the score); a pod without any gets the profile's default
  constraints (``defaultingType: System`` = hostname maxSkew 3 and zone maxSkew 5, both
  ScheduleAnyway) with a selector built from the Services, ReplicationControllers, ReplicaSets
  and StatefulSets that select it (the Handle's ``default_spread_selector``: ``plugins/workloads.py``).
  ``matchLabelKeys`` add ``key=value`` of the pod's own labels
  to the selector; ``minDomains`` defaults to 1, ``nodeAffinityPolicy`` to Honor and
  ``nodeTaintsPolicy`` to Ignore.
* PreFilter counts, per constraint and topology value, the pods in the pod's namespace that
  match the selector (not deleting) on nodes that carry every constraint's topology key and
  pass the inclusion policies. An empty selector (``labelSelector: {}``) counts no pods.
* Filter: a node without a constraint's key is ``node(s) didn't match pod topology spread
  constraints (missing required label)`` (UnschedulableAndUnresolvable); otherwise
  ``count(domain) + self - min`` must not exceed maxSkew (min is 0 while fewer than minDomains
  domains exist), else ``node(s) didn't match pod topology spread constraints``.
* Score (when a profile enables it): per constraint ``count * log(domains + 2) + maxSkew - 1``
  summed and rounded, then reversed min..max so emptier domains score higher.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ome_scheduler.api.core import Node, Pod, TopologySpreadConstraint
from ome_scheduler.config.pluginargs import SYSTEM_DEFAULTING, PodTopologySpreadArgs
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
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.plugins.helper import find_untolerated_taint
from ome_scheduler.plugins.nodeaffinity import required_matches
from ome_scheduler.util.labels import Selector

ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
_PRE_FILTER = "PreFilterPodTopologySpread"
_PRE_SCORE = "PreScorePodTopologySpread"
_SCORED_NODES = "PreScorePodTopologySpread/nodes"

SYSTEM_DEFAULT_CONSTRAINTS = (
    TopologySpreadConstraint(max_skew=3, topology_key=HOSTNAME, when_unsatisfiable=SCHEDULE_ANYWAY),
    TopologySpreadConstraint(max_skew=5, topology_key=ZONE, when_unsatisfiable=SCHEDULE_ANYWAY),
)
"""``systemDefaultConstraints``: used when the profile's ``defaultingType`` is System."""


class DefaultSelectorSource(Protocol):
    """What a handle may offer to build default constraints' selectors (``helper.DefaultSelector``)."""

    def default_spread_selector(self, pod: Pod) -> Selector:
        """The selector merged from the Services, RCs, ReplicaSets and StatefulSets selecting ``pod``."""
        ...


@dataclass(frozen=True, slots=True)
class Constraint:
    """``topologySpreadConstraint``: a parsed constraint (selector already merged with matchLabelKeys)."""

    max_skew: int
    topology_key: str
    selector: Selector
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE

    def includes(self, pod: PodInfo, node: NodeInfo) -> bool:
        """``matchNodeInclusionPolicies``: Honor policies exclude nodes the pod could not use."""
        if self.node_affinity_policy == HONOR and not required_matches(pod, node.name, node.labels):
            return False
        if self.node_taints_policy == HONOR and find_untolerated_taint(node.taints, pod.pod.spec.tolerations):
            return False
        return True


def merge_label_set(match_labels: Mapping[str, str], sel: Selector) -> Selector:
    """``mergeLabelSetWithSelector``: ``key=value`` requirements ANDed with the selector's own."""
    if sel.is_nothing():
        return sel
    return Selector.from_map(match_labels).with_requirements(sel.requirements)


def parse_constraints(
    constraints: Sequence[TopologySpreadConstraint], pod_labels: Mapping[str, str], action: str
) -> list[Constraint]:
    """``filterTopologySpreadConstraints``: the constraints with ``whenUnsatisfiable == action``.

    Raises:
        ValueError: a label selector upstream would reject.
    """
    out: list[Constraint] = []
    for c in constraints:
        if c.when_unsatisfiable != action:
            continue
        sel = Selector.from_label_selector(c.label_selector)
        if c.match_label_keys:
            ml = {k: pod_labels[k] for k in c.match_label_keys if k in pod_labels}
            if ml:
                sel = merge_label_set(ml, sel)
        out.append(
            Constraint(
                max_skew=c.max_skew,
                topology_key=c.topology_key,
                selector=sel,
                min_domains=c.min_domains if c.min_domains is not None else 1,
                node_affinity_policy=c.node_affinity_policy or HONOR,
                node_taints_policy=c.node_taints_policy or IGNORE,
            )
        )
    return out


def node_has_all_keys(labels: Mapping[str, str], constraints: Sequence[Constraint]) -> bool:
    """``nodeLabelsMatchSpreadConstraints``: the node carries every constraint's topology key."""
    return all(c.topology_key in labels for c in constraints)


def count_matching(pods: Mapping[str, PodInfo], sel: Selector, namespace: str) -> int:
    """``countPodsMatchSelector``: live pods of ``namespace`` matching ``sel``; an empty selector counts 0."""
    if sel.is_empty():
        return 0
    n = 0
    for p in pods.values():
        md = p.pod.metadata
        if md.deletion_timestamp is not None or md.namespace != namespace:
            continue
        if sel.matches(md.labels):
            n += 1
    return n


class _FilterState:
    """``preFilterState``: per constraint, the matching pods per domain and the critical paths
    (the two domains with the fewest, ``criticalPaths``), kept as upstream updates them."""

    __slots__ = ("constraints", "counts", "paths")

    def __init__(self, constraints: list[Constraint]) -> None:
        self.constraints = constraints
        self.counts: list[dict[str, int]] = [{} for _ in constraints]
        self.paths: list[list[tuple[str, int]]] = []

    def build_paths(self) -> None:
        """``newCriticalPaths`` then ``update`` with every domain (in count order of the dict)."""
        self.paths = []
        for counts in self.counts:
            p = [("", MAX_INT32), ("", MAX_INT32)]
            for v, n in counts.items():
                _update_paths(p, v, n)
            self.paths.append(p)

    def min_match(self, i: int) -> int:
        """``minMatchNum``: the smallest domain count, or 0 while there are fewer than minDomains domains."""
        if len(self.counts[i]) < self.constraints[i].min_domains:
            return 0
        return self.paths[i][0][1]

    def clone(self) -> _FilterState:
        """``preFilterState.Clone``: constraints shared, counts and paths copied."""
        out = _FilterState(self.constraints)
        out.counts = [dict(c) for c in self.counts]
        out.paths = [list(p) for p in self.paths]
        return out


MAX_INT32 = 2**31 - 1


def _update_paths(p: list[tuple[str, int]], v: str, n: int) -> None:
    """``criticalPaths.update``: keep the two smallest domains as upstream does (a domain already
    tracked takes its new count; another enters when below one of them)."""
    i = 0 if v == p[0][0] else 1 if v == p[1][0] else -1
    if i >= 0:
        p[i] = (v, n)
        if p[0][1] > p[1][1]:
            p[0], p[1] = p[1], p[0]
    elif n < p[0][1]:
        p[1] = p[0]
        p[0] = (v, n)
    elif n < p[1][1]:
        p[1] = (v, n)


class _ScoreState:
    __slots__ = ("constraints", "ignored", "counts", "weights")

    def __init__(self, constraints: list[Constraint]) -> None:
        self.constraints = constraints
        self.ignored: set[str] = set()
        self.counts: list[dict[str, int]] = [{} for _ in constraints]
        self.weights: list[float] = []


def _round_half_away(x: float) -> int:
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


class PodTopologySpread(PreFilterPlugin, PreFilterExtensions, FilterPlugin, PreScorePlugin, ScorePlugin, SignPlugin):
    """Arguments: :class:`PodTopologySpreadArgs` (validated)."""

    name = "PodTopologySpread"

    def __init__(self, handle: Handle, args: PodTopologySpreadArgs) -> None:
        self.handle = handle
        self.system_defaulted = args.defaulting_type == SYSTEM_DEFAULTING
        self.default_constraints = list(
            SYSTEM_DEFAULT_CONSTRAINTS if self.system_defaulted else args.default_constraints
        )
        self._defaults_by_action: dict[str, list[Constraint]] = {}
        """The default constraints parsed once per action: only their selector depends on the
        pod, and :meth:`_build_default` replaces it with the workload's."""

    refuses_some = True

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: refuses a pod with topology spread constraints, and every pod while the
        plugin has default constraints (``defaultingType: System``, the default, or a List of
        them); nothing to add otherwise."""
        if pod.pod.spec.topology_spread_constraints:
            return Status.unschedulable("pods with topology constraints are not signable")
        if self.default_constraints:
            return Status.unschedulable("pods with default topology constraints are not signable")
        return []

    # ---- constraints --------------------------------------------------------------------

    def _default_selector(self, pod: Pod) -> Selector:
        src = getattr(self.handle, "default_spread_selector", None)
        if src is None:
            return Selector.everything()
        sel: Selector = src(pod)
        return sel

    def _build_default(self, pod: Pod, action: str) -> list[Constraint]:
        """``buildDefaultConstraints``: default constraints with the pod's workload selector."""
        cons = self._defaults_by_action.get(action)
        if cons is None:
            # Upstream parses them with the pod's labels, but the selector that parsing builds
            # is the part it then throws away, so the labels change nothing that is kept.
            cons = self._defaults_by_action[action] = parse_constraints(self.default_constraints, {}, action)
        if not cons:
            return []
        sel = self._default_selector(pod)
        if sel.is_empty():
            return []
        return [
            Constraint(c.max_skew, c.topology_key, sel, c.min_domains, c.node_affinity_policy, c.node_taints_policy)
            for c in cons
        ]

    def constraints(self, pod: Pod, action: str) -> list[Constraint]:
        """The pod's own constraints for ``action``, else the defaults (``getConstraints``)."""
        if pod.spec.topology_spread_constraints:
            return parse_constraints(pod.spec.topology_spread_constraints, pod.metadata.labels, action)
        return self._build_default(pod, action)

    # ---- filtering ----------------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """``calPreFilterState``: matching pod counts per constraint and topology value.

        Skip without hard constraints."""
        try:
            cons = self.constraints(pod.pod, DO_NOT_SCHEDULE)
        except ValueError as exc:
            return None, Status(Code.ERROR, f"get constraints from pod: {exc}")
        if not cons:
            return None, Status(Code.SKIP)
        s = _FilterState(cons)
        ns = pod.namespace
        # Constraints with the same topology key and inclusion policies see the same nodes and
        # domains: walk the nodes once per such group, and count matching pods only on nodes
        # that have pods, so many constraints cost little more than one.
        groups: dict[tuple[str, str, str], list[int]] = {}
        for i, c in enumerate(cons):
            groups.setdefault((c.topology_key, c.node_affinity_policy, c.node_taints_policy), []).append(i)
        eligible = [n for n in nodes if node_has_all_keys(n.labels, cons)]
        for (tk, _, _), idxs in groups.items():
            c0 = cons[idxs[0]]
            included = [(n.labels[tk], n) for n in eligible if c0.includes(pod, n)]
            domains = dict.fromkeys((v for v, _ in included), 0)
            with_pods = [(v, n) for v, n in included if n.pods]
            for i in idxs:
                counts = s.counts[i] = dict(domains)
                sel = cons[i].selector
                for v, n in with_pods:
                    counts[v] += count_matching(n.pods, sel, ns)
        s.build_paths()
        state.write(_PRE_FILTER, s)
        return None, None

    def add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo, node: NodeInfo) -> Status | None:
        """``AddPod``: count ``to_add`` in ``node``'s domains.

        Raises:
            KeyError: PreFilter wrote no state.
        """
        self._update_with_pod(state.read(_PRE_FILTER), to_add, pod, node, 1)
        return None

    def remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node: NodeInfo) -> Status | None:
        """``RemovePod``: stop counting ``to_remove`` in ``node``'s domains.

        Raises:
            KeyError: PreFilter wrote no state.
        """
        self._update_with_pod(state.read(_PRE_FILTER), to_remove, pod, node, -1)
        return None

    @staticmethod
    def _update_with_pod(s: _FilterState, updated: PodInfo, preemptor: PodInfo, node: NodeInfo, delta: int) -> None:
        """``updateWithPod``: same namespace, a node with every topology key, each constraint whose
        selector matches and whose inclusion policies admit the node (a terminating pod counts)."""
        if updated.namespace != preemptor.namespace or node.node is None:
            return
        if not node_has_all_keys(node.labels, s.constraints):
            return
        labels = updated.pod.metadata.labels
        for i, c in enumerate(s.constraints):
            if not c.selector.matches(labels) or not c.includes(preemptor, node):
                continue
            v = node.labels[c.topology_key]
            n = s.counts[i][v] = s.counts[i].get(v, 0) + delta
            _update_paths(s.paths[i], v, n)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """``Filter``: the node's domain count plus the pod itself, minus the minimum, within maxSkew."""
        s: _FilterState = state.read(_PRE_FILTER)
        labels = node.labels
        pod_labels = pod.pod.metadata.labels
        for i, c in enumerate(s.constraints):
            tv = labels.get(c.topology_key)
            if tv is None:
                return Status.unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH)
            self_match = 1 if c.selector.matches(pod_labels) else 0
            skew = s.counts[i].get(tv, 0) + self_match - s.min_match(i)
            if skew > c.max_skew:
                return Status.unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH)
        return None

    # ---- scoring ------------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status | None:
        """``PreScore``: domains of the feasible nodes and their matching pod counts over all nodes."""
        all_nodes = self.handle.node_infos()
        if not all_nodes:
            return Status(Code.SKIP)
        try:
            cons = self.constraints(pod.pod, SCHEDULE_ANYWAY)
        except ValueError as exc:
            return Status(Code.ERROR, f"calculating preScoreState: {exc}")
        if not cons:
            return Status(Code.SKIP)
        require_all = bool(pod.pod.spec.topology_spread_constraints) or not self.system_defaulted
        s = _ScoreState(cons)
        sizes = [0] * len(cons)
        for n in nodes:
            if require_all and not node_has_all_keys(n.labels, cons):
                s.ignored.add(n.name)
                continue
            for i, c in enumerate(cons):
                if c.topology_key == HOSTNAME:
                    continue
                v = n.labels.get(c.topology_key, "")
                if v not in s.counts[i]:
                    s.counts[i][v] = 0
                    sizes[i] += 1
        for i, c in enumerate(cons):
            size = len(nodes) - len(s.ignored) if c.topology_key == HOSTNAME else sizes[i]
            s.weights.append(math.log(size + 2))
        ns = pod.namespace
        for n in all_nodes:
            if require_all and not node_has_all_keys(n.labels, cons):
                continue
            for i, c in enumerate(cons):
                if not c.includes(pod, n):
                    continue
                v = n.labels.get(c.topology_key, "")
                if v not in s.counts[i]:
                    continue
                s.counts[i][v] += count_matching(n.pods, c.selector, ns)
        state.write(_PRE_SCORE, s)
        return None

    def score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        """``Score`` per node: ``sum(count * log(domains + 2) + maxSkew - 1)``, rounded."""
        s: _ScoreState = state.read(_PRE_SCORE)
        state.write(_SCORED_NODES, [n.name for n in nodes])
        out = []
        for n in nodes:
            if n.name in s.ignored:
                out.append(0)
                continue
            total = 0.0
            for i, c in enumerate(s.constraints):
                tv = n.labels.get(c.topology_key)
                if tv is None:
                    continue
                if c.topology_key == HOSTNAME:
                    cnt = count_matching(n.pods, c.selector, pod.namespace)
                else:
                    cnt = s.counts[i][tv]
                total += cnt * s.weights[i] + (c.max_skew - 1)
            out.append(_round_half_away(total))
        return out

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        """``NormalizeScore``: ``100 * (max + min - score) / max``; ignored nodes 0."""
        s: _ScoreState | None = state.get(_PRE_SCORE)
        if s is None:
            return
        names: list[str] = state.get(_SCORED_NODES) or []
        ignored = [bool(names) and names[i] in s.ignored for i in range(len(scores))]
        lo, hi = None, 0
        for i, sc in enumerate(scores):
            if ignored[i]:
                continue
            lo = sc if lo is None or sc < lo else lo
            hi = max(hi, sc)
        for i, sc in enumerate(scores):
            if ignored[i]:
                scores[i] = 0
            elif hi == 0:
                scores[i] = MAX_NODE_SCORE
            else:
                scores[i] = MAX_NODE_SCORE * (hi + (lo or 0) - sc) // hi

    # ---- queueing hints -----------------------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """Pod add/label/toleration/delete and Node add/delete/label/taint, with upstream's hints."""
        return [
            on(
                "Pod",
                ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.UPDATE_POD_TOLERATION | ActionType.DELETE,
                self.is_schedulable_after_pod_change,
            ),
            on(
                "Node",
                ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT,
                self.is_schedulable_after_node_change,
            ),
        ]

    @staticmethod
    def _involved(incoming: Pod, target: Pod) -> bool:
        """``involvedInTopologySpreading``."""
        return incoming.metadata.uid == target.metadata.uid or (
            bool(incoming.spec.node_name) and incoming.metadata.namespace == target.metadata.namespace
        )

    @queueing_hint
    def is_schedulable_after_pod_change(self, pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
        """Queue when a pod involved in the pod's spreading changed whether a DoNotSchedule selector counts it."""
        o, m = old, new
        if (m is not None and not self._involved(m, pod)) or (o is not None and not self._involved(o, pod)):
            return QueueingHint.QUEUE_SKIP
        cons = self.constraints(pod, DO_NOT_SCHEDULE)
        if m is not None and o is not None:
            if (
                pod.metadata.uid == m.metadata.uid
                and m.spec.tolerations != o.spec.tolerations
                and any(c.node_taints_policy == HONOR for c in cons)
            ):
                return QueueingHint.QUEUE
            if m.metadata.labels == o.metadata.labels:
                return QueueingHint.QUEUE_SKIP
            for c in cons:
                if c.selector.matches(o.metadata.labels) != c.selector.matches(m.metadata.labels):
                    return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        target = m if m is not None else o
        if target is None:
            return QueueingHint.QUEUE
        if any(c.selector.matches(target.metadata.labels) for c in cons):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @queueing_hint
    def is_schedulable_after_node_change(self, pod: Pod, old: Node | None, new: Node | None) -> QueueingHint:
        """Queue when a node entered, left or moved between the domains of the pod's DoNotSchedule constraints."""
        cons = self.constraints(pod, DO_NOT_SCHEDULE)
        o, m = old, new
        o_match = o is not None and node_has_all_keys(o.metadata.labels, cons)
        m_match = m is not None and node_has_all_keys(m.metadata.labels, cons)
        if o is not None and m is not None:
            if o_match != m_match:
                return QueueingHint.QUEUE
            if m_match and (
                any(
                    o.metadata.labels.get(c.topology_key, "") != m.metadata.labels.get(c.topology_key, "") for c in cons
                )
                or o.spec.taints != m.spec.taints
            ):
                return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        if m is not None:
            return QueueingHint.QUEUE if m_match else QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE if o_match else QueueingHint.QUEUE_SKIP
