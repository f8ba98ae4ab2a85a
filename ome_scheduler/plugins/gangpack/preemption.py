"""Gang preemption's decision: which domain to free for a gang that fits none, and whom to evict there.

Implements the pure part of product rule 13 (``docs/design/gang-scheduling.md`` §16.1–§16.4):
no Kubernetes I/O and no plugin state, only the cycle's snapshot (NodeInfos, the PDBs) and the
preemptor gang's planner (its templates, ``need`` and member capacity, as PreFilter plans it).

* Eligibility (§16.1, :func:`gang_may_preempt`): no member says ``preemptionPolicy: Never``;
  the gang's priority is its lowest member's.
* Victim units (§16.2, :func:`victim_units`): a standalone pod is one unit; a gang (other
  than the preemptor's) is one unit made of all its placed pods, in any domain, evicted whole
  or not at all. A unit may be evicted only when every pod of it has a priority strictly below
  the preemptor's and (by default) this scheduler's ``schedulerName``. Pods being deleted are
  already leaving: they free their room at no cost and are never victims.
* A domain's dry run (§16.3, :func:`dry_run_domain`): with every evictable unit that has a pod
  in the domain removed, the gang must be able to join the domain (rule 1, the same check as
  PreFilter's); otherwise eviction cannot help there and nothing is evicted for it. Then the
  units are reprieved one at a time, PDB-violating units first, most important first (upstream's
  ``SelectVictimsOnNode`` order, per unit instead of per pod): a unit whose return still lets
  the gang join stays.
* The ranking (§16.4, :func:`decide`): fewest PDB violations, lowest highest victim priority,
  fewest victim pods, fewest gangs broken, least room left over after the gang is placed (best
  fit, rule 2), then the smallest domain name.
* For the writes still to be wired (§16.5, §16.7): the ``Preempting`` event's note
  (:func:`preempting_note`) and a preemption already under way, found from the members'
  nominations and the terminating victims (:func:`preemption_in_progress`).

Upstream counterparts: ``pkg/scheduler/framework/preemption/preemption.go`` (``DryRunPreemption``,
``SelectVictimsOnNode`` in ``plugins/defaultpreemption``) and ``pickOneNodeForPreemption``, lifted
from nodes to domains. Units: room in members, priorities as in ``spec.priority``, times in
epoch seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ome_scheduler.framework.preemption import filter_pods_with_pdb_violation, start_time, terminating_by_preemption
from ome_scheduler.framework.types import GangKey, NodeInfo, PodInfo
from ome_scheduler.plugins.gangpack.placement import GangPlanner, node_cap

if TYPE_CHECKING:
    from ome_scheduler.api.workloads import PodDisruptionBudget

NO_PRIORITY = -(2**31) - 1
"""The "highest victim priority" of a domain that needs no victim (below every int32 priority)."""

CRITERIA = (
    "fewest PodDisruptionBudget violations",
    "lowest highest victim priority",
    "fewest victim pods",
    "fewest gangs broken",
    "least room left over",
    "smallest name",
)
"""§16.4's criteria in order; :attr:`Decision.why` names the first that decided."""


@dataclass(frozen=True, slots=True)
class Unit:
    """One thing that is evicted whole (§16.2): a standalone pod, or every placed pod of a gang.

    ``key`` is the gang key, or the pod's ``namespace/name``; ``gang`` the gang key or ``""``;
    ``pods`` the unit's placed pods not being deleted (the ones an eviction deletes);
    ``priority`` the highest of them; ``start`` the earliest start (epoch seconds).
    """

    key: str
    gang: GangKey
    pods: tuple[PodInfo, ...]
    priority: int
    start: float


@dataclass(frozen=True, slots=True)
class DomainCost:
    """One domain the gang fits in once ``units`` are evicted (§16.3), with §16.4's measures.

    ``victims``: the pods to delete, most important first; ``gangs``: the gang keys evicted;
    ``pdb_violations``: victims whose eviction a PodDisruptionBudget does not allow;
    ``top_priority``: the highest victim priority (:data:`NO_PRIORITY` without victims);
    ``leftover``: the domain's room after eviction minus the members still to place.
    """

    domain: str
    units: tuple[Unit, ...]
    victims: tuple[PodInfo, ...]
    gangs: tuple[GangKey, ...]
    pdb_violations: int
    top_priority: int
    leftover: int

    def rank(self) -> tuple[int, int, int, int, int, str]:
        """§16.4's sort key: smaller is better."""
        return (self.pdb_violations, self.top_priority, len(self.victims), len(self.gangs), self.leftover, self.domain)


@dataclass(frozen=True, slots=True)
class Decision:
    """What :func:`decide` chose: ``chosen`` (None: no domain can be freed), every feasible
    domain best first (``ranked``), the domains where even evicting every allowed unit leaves
    the gang without room (``hopeless``), those not evaluated because a hold of an equal- or
    higher-priority gang keeps them (``held``), and ``why``: the reason for the choice (the
    criterion that beat the runner-up) or for no choice."""

    chosen: DomainCost | None
    ranked: tuple[DomainCost, ...] = ()
    hopeless: tuple[str, ...] = ()
    held: tuple[str, ...] = ()
    why: str = ""


@dataclass(slots=True)
class Snapshot:
    """The cycle's nodes grouped for preemption: nodes per domain under ``topology_key``, each
    gang's placed pods anywhere, and each placed pod's node name by pod key (built once per
    decision, linear in pods)."""

    topology_key: str
    domains: dict[str, list[NodeInfo]] = field(default_factory=dict)
    gang_pods: dict[GangKey, list[PodInfo]] = field(default_factory=dict)
    node_of: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, nodes: Iterable[NodeInfo], topology_key: str) -> Snapshot:
        """Group ``nodes`` (nodes without the label, or without a Node object, are in no domain)."""
        snap = cls(topology_key)
        domains, gang_pods, node_of = snap.domains, snap.gang_pods, snap.node_of
        for n in nodes:
            d = n.labels.get(topology_key, "")
            if d and n.node is not None:
                domains.setdefault(d, []).append(n)
            name = n.name
            for k, p in n.pods.items():
                node_of[k] = name
                if p.gang:
                    gang_pods.setdefault(p.gang_key, []).append(p)
        return snap


def gang_may_preempt(members: Sequence[PodInfo]) -> tuple[bool, str]:
    """§16.1: (whether the gang may preempt, why not). ``members``: its unplaced live members."""
    for m in members:
        if m.pod.spec.preemption_policy == "Never":
            return False, f"not eligible due to preemptionPolicy=Never of member {m.key}"
    return True, ""


def gang_priority(members: Sequence[PodInfo]) -> int:
    """§16.1: the preemptor gang's priority, its lowest member's (0 without members)."""
    return min((m.priority for m in members), default=0)


def _evictable(p: PodInfo, priority: int, schedulers: frozenset[str] | None) -> bool:
    """§16.2: strictly lower priority and (unless ``schedulers`` is None) one of these schedulers'."""
    return p.priority < priority and (schedulers is None or p.pod.spec.scheduler_name in schedulers)


def _leaving(p: PodInfo) -> bool:
    return p.pod.metadata.deletion_timestamp is not None


def victim_units(
    snap: Snapshot,
    domain_nodes: Sequence[NodeInfo],
    preemptor: GangKey,
    priority: int,
    schedulers: frozenset[str] | None,
    now: float,
) -> list[Unit]:
    """§16.2: the evictable units with a pod on ``domain_nodes``, most important first (highest
    priority, then earliest start, then key). A gang unit qualifies only when each of its pods,
    wherever placed, is evictable; the preemptor's own gang is never a unit."""
    units: dict[str, Unit | None] = {}
    for n in domain_nodes:
        for p in n.pods.values():
            if _leaving(p):
                continue
            if p.gang:
                k = p.gang_key
                if k == preemptor or k in units:
                    continue
                pods = [q for q in snap.gang_pods.get(k, ()) if not _leaving(q)]
                if all(_evictable(q, priority, schedulers) for q in pods):
                    units[k] = Unit(
                        k, k, tuple(pods), max(q.priority for q in pods), min(start_time(q, now) for q in pods)
                    )
                else:
                    units[k] = None
            elif _evictable(p, priority, schedulers):
                units[p.key] = Unit(p.key, GangKey(""), (p,), p.priority, start_time(p, now))
    found = [u for u in units.values() if u is not None]
    found.sort(key=lambda u: (-u.priority, u.start, u.key))
    return found


class _DomainFit:
    """The gang's fit in one domain under removals: per-node counts kept up to date as pods
    are removed and re-added, copying a node (``NodeInfo.snapshot``) the first time it changes."""

    def __init__(
        self, planner: GangPlanner[PodInfo, NodeInfo], nodes: Sequence[NodeInfo], node_of: dict[str, str]
    ) -> None:
        self.planner = planner
        self.node_of = node_of
        self.nodes = list(nodes)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.copied: set[int] = set()
        self.counts: list[dict[Hashable, int]] = []
        self.caps: list[int] = []

    def _node(self, name: str) -> tuple[int, NodeInfo] | None:
        i = self.index.get(name)
        if i is None:
            return None
        if i not in self.copied:
            self.nodes[i] = self.nodes[i].snapshot()
            self.copied.add(i)
        return i, self.nodes[i]

    def remove(self, pods: Iterable[PodInfo]) -> set[int]:
        """Un-account ``pods`` that sit on this domain's nodes; the indexes of the nodes changed."""
        changed: set[int] = set()
        for p in pods:
            hit = self._node(self.node_of.get(p.pod_key, ""))
            if hit is not None and hit[1].remove_pod(p.pod_key) is not None:
                changed.add(hit[0])
        return changed

    def add(self, pods: Iterable[PodInfo]) -> set[int]:
        """Account ``pods`` back (those of this domain's nodes); the indexes of the nodes changed."""
        changed: set[int] = set()
        for p in pods:
            hit = self._node(self.node_of.get(p.pod_key, ""))
            if hit is not None:
                hit[1].add_pod(p)
                changed.add(hit[0])
        return changed

    def count_all(self) -> None:
        self.counts = [self.planner.node_counts(n) for n in self.nodes]
        self.caps = [node_cap(c) for c in self.counts]

    def recount(self, changed: Iterable[int]) -> list[tuple[int, dict[Hashable, int], int]]:
        """Count the ``changed`` nodes again; returns their previous counts for :meth:`restore`."""
        before = []
        for i in changed:
            before.append((i, self.counts[i], self.caps[i]))
            c = self.planner.node_counts(self.nodes[i])
            self.counts[i] = c
            self.caps[i] = node_cap(c)
        return before

    def restore(self, before: Iterable[tuple[int, dict[Hashable, int], int]]) -> None:
        """Put back the counts :meth:`recount` replaced (after the same pods were removed again)."""
        for i, c, cap in before:
            self.counts[i] = c
            self.caps[i] = cap

    def joinable(self) -> bool:
        return self.planner.joinable_with(self.counts, self.caps)


def dry_run_domain(
    planner: GangPlanner[PodInfo, NodeInfo],
    snap: Snapshot,
    domain: str,
    preemptor: GangKey,
    priority: int,
    pdbs: Sequence[PodDisruptionBudget],
    schedulers: frozenset[str] | None,
    now: float,
) -> DomainCost | None:
    """§16.3: the units to evict in ``domain`` so the whole gang fits there, or None when even
    evicting every evictable unit leaves it without room. Mirrors ``SelectVictimsOnNode``: remove
    all, check, then reprieve PDB-violating units first, each group most important first. A
    domain the gang joins as it stands (pods being deleted gone) needs no victim."""
    nodes = snap.domains.get(domain, [])
    if not nodes:
        return None
    fit = _DomainFit(planner, nodes, snap.node_of)
    fit.remove(p for n in nodes for p in n.pods.values() if _leaving(p))
    fit.count_all()
    victims: list[Unit] = []
    if not fit.joinable():
        units = victim_units(snap, nodes, preemptor, priority, schedulers, now)
        for u in units:
            fit.recount(fit.remove(u.pods))
        if not fit.joinable():
            return None
        violating_pods, _ = filter_pods_with_pdb_violation([p for u in units for p in u.pods], pdbs)
        bad = {p.pod_key for p in violating_pods}
        order = [u for u in units if any(p.pod_key in bad for p in u.pods)]
        order += [u for u in units if not any(p.pod_key in bad for p in u.pods)]
        last = len(order) - 1
        for i, u in enumerate(order):
            if i == last and not victims:
                victims.append(u)  # every other unit is back: the domain as it stands, which the gang cannot join
                break
            before = fit.recount(fit.add(u.pods))
            if fit.joinable():
                continue  # reprieved
            fit.remove(u.pods)
            fit.restore(before)
            victims.append(u)
    victims.sort(key=lambda u: (-u.priority, u.start, u.key))
    pods = [p for u in victims for p in u.pods]
    pods.sort(key=lambda p: (-p.priority, start_time(p, now)))
    violations, _ = filter_pods_with_pdb_violation(pods, pdbs)
    return DomainCost(
        domain=domain,
        units=tuple(victims),
        victims=tuple(pods),
        gangs=tuple(u.gang for u in victims if u.gang),
        pdb_violations=len(violations),
        top_priority=max((u.priority for u in victims), default=NO_PRIORITY),
        leftover=sum(fit.caps) - planner.need,
    )


def _why(best: DomainCost, runner_up: DomainCost | None) -> str:
    """The §16.4 criterion that put ``best`` before ``runner_up``, with both values."""
    if runner_up is None:
        return "the only domain where eviction makes the gang fit"
    a, b = best.rank(), runner_up.rank()
    for name, x, y in zip(CRITERIA, a, b, strict=True):
        if x != y:
            return f"{name} ({_shown(x)} vs {_shown(y)} in {runner_up.domain})"
    return "smallest name"  # unreachable: domain names differ


def _shown(v: object) -> str:
    return "none" if v == NO_PRIORITY else str(v)


def decide(
    planner: GangPlanner[PodInfo, NodeInfo],
    snap: Snapshot,
    preemptor: GangKey,
    priority: int,
    pdbs: Sequence[PodDisruptionBudget],
    *,
    schedulers: frozenset[str] | None,
    held: Callable[[str], bool] = lambda _d: False,
    only: str = "",
    now: float,
) -> Decision:
    """§16.3–§16.4: dry-run every domain of the snapshot's key and pick the cheapest.

    Args:
        planner: the preemptor gang's planner (templates: the unplaced live members, current
            one first; ``need``: members still to place), as PreFilter builds it.
        snap: the cycle's nodes grouped by domain (:meth:`Snapshot.of`).
        preemptor: the preemptor's gang key (its own pods are never victims).
        priority: the preemptor's priority (:func:`gang_priority`).
        pdbs: the PodDisruptionBudgets (upstream's violation count).
        schedulers: the ``schedulerName`` values whose pods may be victims (None: any).
        held: domains kept by a hold the preemptor may not break (an equal- or higher-priority
            gang forming there); they are not evaluated.
        only: the domain of the gang's placed members (``""``: none placed): a partly placed
            gang completes only there (§3.7 step 11), so no other domain is evaluated.
        now: epoch seconds, the start time of pods not started.
    """
    ranked: list[DomainCost] = []
    hopeless: list[str] = []
    skipped: list[str] = []
    for d in [only] if only else sorted(snap.domains):
        if held(d):
            skipped.append(d)
            continue
        cost = dry_run_domain(planner, snap, d, preemptor, priority, pdbs, schedulers, now)
        if cost is None:
            hopeless.append(d)
        else:
            ranked.append(cost)
    ranked.sort(key=DomainCost.rank)
    if not ranked:
        why = (
            f"preemption cannot make gang {preemptor} fit any domain: "
            f"{len(hopeless)} without room even after evicting every lower-priority pod"
            + (f", {len(skipped)} held by gangs of equal or higher priority" if skipped else "")
        )
        return Decision(None, (), tuple(hopeless), tuple(skipped), why)
    best = ranked[0]
    why = _why(best, ranked[1] if len(ranked) > 1 else None)
    return Decision(best, tuple(ranked), tuple(hopeless), tuple(skipped), why)


MAX_NAMED_VICTIMS = 10
"""Victims named in a ``Preempting`` note before ``and {k} more``."""


def preempting_note(decision: Decision, topology_key: str, gang: GangKey) -> str:
    """§16.5 step 3: the note of the ``Preempting`` event on the preemptor's PodGroup, e.g.
    ``preempting 4 pod(s) in nvidia.com/gpu.clique=c1 for gang ns/hi: ns/a, ns/b, ns/c, ns/d;
    lowest highest victim priority (10 vs 50 in c2)``; ``""`` when nothing is evicted."""
    c = decision.chosen
    if c is None or not c.victims:
        return ""
    shown = [p.key for p in c.victims[:MAX_NAMED_VICTIMS]]
    more = len(c.victims) - len(shown)
    victims = ", ".join(shown) + (f" and {more} more" if more else "")
    return f"preempting {len(c.victims)} pod(s) in {topology_key}={c.domain} for gang {gang}: {victims}; {decision.why}"


def preemption_in_progress(snap: Snapshot, members: Sequence[PodInfo], priority: int) -> str:
    """§16.7 without the plan annotation: the domain of a preemption already under way for this
    gang, or ``""``. It is under way when a member's ``nominatedNodeName`` names a node of a
    domain (under the snapshot's key) where a pod of lower priority than ``priority`` is
    terminating because a scheduler preempted it (upstream's ``podTerminatingByPreemption``):
    the gang then waits for that domain instead of preempting again, on this leader as on the
    next one. Mirrors the nominated-node clause of upstream's ``PodEligibleToPreemptOthers``,
    lifted from the node to its domain."""
    nominated = {m.pod.status.nominated_node_name for m in members} - {""}
    if not nominated:
        return ""
    for d, nodes in sorted(snap.domains.items()):
        if not any(n.name in nominated for n in nodes):
            continue
        for n in nodes:
            for p in n.pods.values():
                if p.priority < priority and terminating_by_preemption(p.pod):
                    return d
    return ""
