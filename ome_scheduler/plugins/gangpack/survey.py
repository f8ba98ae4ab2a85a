"""The per-cycle domain survey: every domain of one topology key as one gang sees it.

Built once per gang PreFilter from the cycle's snapshot, it answers, lazily and memoised,
which nodes form a domain, the domain's :class:`~ome_scheduler.plugins.gangpack.placement.DomainPlan`
(room counted in members, whether the gang can join, product rule 1) and best fit among the
domains (rule 2). A homogeneous gang reads rooms from the per-shape
:class:`~ome_scheduler.plugins.gangpack.placement.RoomIndex`, so best fit is a bisection
instead of a cluster scan; a gang of mixed shapes plans the domains one by one.

Pure: no Kubernetes I/O and no plugin state is changed; holds and failed domains are passed
in as predicates by the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ome_scheduler.framework.topology import domain_value, is_composite
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.plugins.gangpack.placement import DomainPlan, GangPlanner, RoomIndex, best_fit, group_by_domain


@dataclass
class DomainSurvey:
    """Domains under ``topology_key`` for a gang that still needs ``need`` members placed.

    Args:
        planner: the gang's planner (its templates and member capacity function).
        need: members still to place (room below it means "does not fit").
        topology_key: the node label that defines the domains, or a preferred level's key
            (``R>P``, §3.9; :func:`~ome_scheduler.framework.topology.domain_value`).
        nodes: the cycle's snapshot of NodeInfos.
        index: the room index of the gang's member shape, or None for a mixed-shape gang.
        node_info: looks a node up by name in the same snapshot (None: gone).
    """

    planner: GangPlanner[PodInfo, NodeInfo]
    need: int
    topology_key: str
    nodes: Sequence[NodeInfo]
    index: RoomIndex[PodInfo, NodeInfo] | None
    node_info: Callable[[str], NodeInfo | None]
    _plans: dict[str, DomainPlan[NodeInfo] | None] = field(default_factory=dict, init=False, repr=False)

    def nodes_of(self, domain: str) -> list[NodeInfo]:
        """The snapshot's nodes of ``domain`` (by the index when there is one, else a scan)."""
        if not domain:
            return []
        if self.index is not None:
            found = (self.node_info(n) for n in sorted(self.index.members.get(domain, ())))
            return [n for n in found if n is not None]
        tk = self.topology_key
        if not is_composite(tk):  # the common case, on every node: the label read inline
            return [n for n in self.nodes if n.labels.get(tk, "") == domain]
        return [n for n in self.nodes if domain_value(n.labels, tk) == domain]

    def node_names_of(self, domain: str) -> list[str]:
        """Names of the nodes of ``domain`` (the index's membership when there is one)."""
        if self.index is not None:
            return sorted(self.index.members.get(domain, ()))
        return [n.name for n in self.nodes_of(domain)]

    def plan(self, domain: str) -> DomainPlan[NodeInfo] | None:
        """The domain's plan, or None when it has no node in the snapshot."""
        if domain not in self._plans:
            nodes = self.nodes_of(domain)
            self._plans[domain] = self.planner.plan_domain(domain, nodes) if nodes else None
        return self._plans[domain]

    def room(self, domain: str) -> int:
        """Members the domain takes for this gang now (0 when it cannot join it)."""
        p = self.plan(domain) if domain else None
        return p.room if p is not None and p.joinable else 0

    def rooms(self) -> dict[str, int]:
        """Room of every domain, sorted by name (the index's rooms below ``need`` shown as 0)."""
        if self.index is not None:
            return {d: (r if r >= self.need else 0) for d, r in sorted(self.index.room.items())}
        tk = self.topology_key
        if is_composite(tk):
            by = group_by_domain(self.nodes, lambda n: domain_value(n.labels, tk))
        else:
            by = group_by_domain(self.nodes, lambda n: n.labels.get(tk, ""))
        for d, nodes in by.items():
            if d not in self._plans:
                self._plans[d] = self.planner.plan_domain(d, nodes)
        return {d: self.room(d) for d in sorted(by)}

    def raw_rooms(self) -> dict[str, int]:
        """Members every domain takes now, whatever the gang needs and whether it can join."""
        if self.index is not None:
            return dict(self.index.room)
        out = {}
        for d in self.domain_names():
            p = self.plan(d)
            out[d] = p.room if p is not None else 0
        return out

    def domain_names(self) -> list[str]:
        """Every domain of the survey's key with a node in the snapshot, sorted."""
        if self.index is not None:
            return sorted(self.index.members)
        tk = self.topology_key
        return sorted({d for n in self.nodes if (d := domain_value(n.labels, tk))})

    def best_fit(self, excluded: Callable[[str], bool]) -> str | None:
        """Rule 2: the joinable domain with the least room ``>= need`` not ``excluded``; ties by name.

        At a preferred level (§3.9, a level key ``R>P``) a tie on room goes to the domain whose
        required-level parent has the least room left (the fuller one), then by name, so a
        wholly free parent is not broken into while a used one fits the gang as well."""
        if is_composite(self.topology_key):
            return self._best_fit_fuller_parent(excluded)
        if self.index is not None:
            d = self.index.best_fit(self.need, excluded)
            if d is not None and (p := self.plan(d)) is not None and not p.joinable:
                return None  # enough room in sum, but some member would be stranded there
            return d
        return best_fit({d: r for d, r in self.rooms().items() if not excluded(d)}, self.need)

    def _best_fit_fuller_parent(self, excluded: Callable[[str], bool]) -> str | None:
        """Best fit at a preferred level, ties to the fuller parent (see :meth:`best_fit`)."""
        rooms = self.index.room if self.index is not None else self.rooms()
        parent: dict[str, int] = {}
        for d, r in rooms.items():
            top = d.partition(",")[0]
            parent[top] = parent.get(top, 0) + r
        fitting = [(r, d) for d, r in rooms.items() if r >= self.need and not excluded(d)]
        if not fitting or self.need <= 0:
            return None
        least = min(r for r, _ in fitting)
        for d in sorted((d for r, d in fitting if r == least), key=lambda d: (parent[d.partition(",")[0]], d)):
            p = self.plan(d)
            if p is not None and p.joinable:
                return d
        return None
