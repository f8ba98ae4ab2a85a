"""Reading a simulation's outcome: where each pod went, how each gang fared, every domain's room.

Lives here: :class:`OutcomeReader`, the half of :class:`~ome_scheduler.tools.simulation.Simulation`
that reads the offline scheduler once it settled (its cache, queue, recorder and binder) into
the records of :mod:`ome_scheduler.tools.report`; and :class:`NodeState` / :class:`ClusterView`,
a node's and the cluster's state at one moment (before and after). No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.api.snapshot import ClusterSnapshot
from ome_scheduler.config.pluginargs import OMEGangPackArgs
from ome_scheduler.framework.gangsource import gang_name, lws_size, lws_topology_key, source_of
from ome_scheduler.framework.types import NodeInfo, PodInfo, Resource, gang_key
from ome_scheduler.plugins.gangpack.fit import member_capacity, one_per_node, template_signature
from ome_scheduler.plugins.gangpack.gang import topology_key_of
from ome_scheduler.plugins.gangpack.metrics import is_free_node
from ome_scheduler.plugins.gangpack.placement import GangPlanner, group_by_domain
from ome_scheduler.scheduler import Scheduler
from ome_scheduler.tools.report import DomainRow, DomainTable, GangResult, NodeCell, PodResult, SimulationResult
from ome_scheduler.tools.standins import CapturingRecorder, MemoryBinder, MemoryWriter, PodNotes


def _label(key: str) -> Callable[[NodeInfo], str]:
    return lambda n: n.labels.get(key, "")


def _gang_order(p: Pod) -> tuple[str, str, str]:
    return (p.metadata.namespace, gang_name(p.metadata), p.metadata.name)


def _unbound(pod: Pod) -> PodInfo:
    """A member's shape: the pod without its node (a bound pod fits no other node)."""
    return PodInfo(msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, node_name="")))


def accelerator_of(nodes: Iterable[Node]) -> str:
    """The extended resource (a name with ``/``) with the largest total allocatable, else ``cpu``."""
    totals: dict[str, int] = {}
    for n in nodes:
        try:
            scalar = Resource.from_list(n.status.allocatable).scalar
        except ValueError:
            continue  # an unreadable quantity: the cache will say so when it adds the node
        for k, v in scalar.items():
            if "/" in k and not k.startswith(("hugepages-", "kubernetes.io/")):
                totals[k] = totals.get(k, 0) + v
    return max(sorted(totals), key=lambda k: totals[k]) if totals else "cpu"


@dataclass(frozen=True)
class NodeState:
    """One node at one moment: ``resource`` allocatable and free (cpu in whole cores), whether
    it is a free node (``ome_scheduler_domain_free_nodes``' rule), and the gangs on it."""

    capacity: int
    free: int
    free_node: bool
    gangs: tuple[str, ...]

    @classmethod
    def of(cls, ni: NodeInfo, resource: str) -> NodeState:
        """Read ``ni`` now."""
        if resource == "cpu":
            a, u = ni.allocatable.milli_cpu, ni.requested.milli_cpu
            cap, free = a // 1000, max(0, a - u) // 1000
        else:
            a = ni.allocatable.scalar.get(resource, 0)
            cap, free = a, max(0, a - ni.requested.scalar.get(resource, 0))
        gangs = tuple(sorted({pi.gang_key for pi in ni.pods.values() if pi.gang}))
        return cls(cap, free, is_free_node(ni), gangs)


@dataclass
class ClusterView:
    """Every node's :class:`NodeState` and every domain's room, at one moment."""

    nodes: dict[str, NodeState]
    rooms: dict[str, dict[str, int | None]]
    """Topology key -> domain -> room in members of the key's shape (None: no shape)."""


class OutcomeReader:
    """What a settled simulation found, read from its scheduler (mixed into ``Simulation``)."""

    scheduler: Scheduler
    snapshot: ClusterSnapshot
    added: list[Any]
    gang_args: OMEGangPackArgs | None
    recorder: CapturingRecorder
    binder: MemoryBinder
    writer: MemoryWriter
    resource: str
    warnings: list[str]
    _settled: bool

    def _topology_key(self, pg: PodGroup | None, member: Pod | None = None) -> str:
        """A gang's domain label (the PodGroup's annotation, else the configured key); an LWS
        group's (``member``'s annotations, design §2.1) when it has no PodGroup."""
        if self.gang_args is None:
            return ""
        if pg is not None:
            return topology_key_of(pg, self.gang_args)
        lws = member is not None and source_of(gang_name(member.metadata)) == "LeaderWorkerSet"
        return (lws_topology_key(member.metadata) if member is not None and lws else "") or self.gang_args.topology_key

    def _gang_shapes(self) -> dict[str, PodInfo | None]:
        """Topology key -> the member shape its room is counted in: the first member (by gang
        and name) of an added gang, else of a pending gang, else of any gang under that key;
        the configured ``topologyKey`` maps to None when no gang uses it."""
        groups = {(g.metadata.namespace, g.metadata.name): g for g in self.snapshot.pod_groups}
        groups.update({(o.metadata.namespace, o.metadata.name): o for o in self.added if isinstance(o, PodGroup)})
        added = [o for o in self.added if isinstance(o, Pod)]
        ranked = (added, [p for p in self.snapshot.pods if not p.spec.node_name], self.snapshot.pods)
        shapes: dict[str, PodInfo | None] = {}
        for pods in ranked:
            for p in sorted(pods, key=_gang_order):
                g = gang_name(p.metadata)
                if not g:
                    continue
                tk = self._topology_key(groups.get((p.metadata.namespace, g)), p)
                if tk and tk not in shapes:
                    shapes[tk] = _unbound(p)
        fallback = self.gang_args.topology_key if self.gang_args is not None else ""
        if fallback and fallback not in shapes:
            shapes[fallback] = None  # free nodes only: no gang shape to count room in
        return shapes

    def _view(self, shapes: Mapping[str, PodInfo | None]) -> ClusterView:
        """The cache now: every node's state and every domain's room."""
        nodes = self.scheduler.cache.node_infos()
        rooms: dict[str, dict[str, int | None]] = {}
        for tk, shape in shapes.items():
            by = group_by_domain(nodes, _label(tk))
            if shape is None:
                rooms[tk] = dict.fromkeys(by)
                continue
            planner = GangPlanner(
                [shape], 1, member_capacity, one_per_node=one_per_node([shape]), signature=template_signature
            )
            rooms[tk] = {d: planner.plan_domain(d, members).room for d, members in by.items()}
        return ClusterView({ni.name: NodeState.of(ni, self.resource) for ni in nodes}, rooms)

    def _result(
        self,
        targets: list[PodInfo],
        before: ClusterView,
        after: ClusterView,
        shapes: Mapping[str, PodInfo | None],
        elapsed: float,
    ) -> SimulationResult:
        pods = self._pod_results(targets)
        gangs = self._gang_results(pods)
        keys = sorted({g.topology_key for g in gangs if g.topology_key} | set(shapes))
        tables, node_map = [], {}
        for tk in keys:
            shape = shapes.get(tk)
            table, cells = self._domains(tk, before, after, shape.gang_key if shape is not None else "")
            tables.append(table)
            node_map[tk] = cells
        snap = self.snapshot
        return SimulationResult(
            snapshot={
                "takenAt": snap.metadata.taken_at,
                "anonymized": snap.metadata.anonymized,
                "nodes": len(snap.nodes),
                "pods": len(snap.pods),
                "podGroups": len(snap.pod_groups),
                "added": len(self.added),
            },
            simulated_seconds=round(elapsed, 3),
            wall_seconds=0.0,
            settled=self._settled,
            pods=pods,
            gangs=gangs,
            domains=tables,
            node_map=node_map,
            warnings=list(self.warnings),
            preempted=list(self.writer.evictions),
        )

    def _domain_of(self, node: str, tk: str) -> str:
        ni = self.scheduler.cache.get_node_info(node)
        return ni.labels.get(tk, "") if ni is not None and tk else ""

    def _pod_results(self, targets: list[PodInfo]) -> list[PodResult]:
        """Where each pod this simulation scheduled ended up, and why if nowhere."""
        sch = self.scheduler
        waiting = {wp.pod_info.key: wp for wp in sch.waiting_pods()}
        q = sch.queue
        attempts = {
            x.pod_info.key: x.attempts
            for x in [
                *q.active.values(),
                *q.backoff.values(),
                *q.gang_backoff.values(),
                *q.error_backoff.values(),
                *q.unschedulable.values(),
            ]
        }
        out = []
        for pi in sorted(targets, key=lambda p: p.key):
            live = sch.pods.get(pi.key)
            if live is None:
                continue  # deleted meanwhile (an added object cannot do that, but stay safe)
            pg = sch.pod_group_state.get(pi.namespace, pi.gang) if pi.gang else None
            tk = self._topology_key(pg, live.pod)
            notes = self.recorder.notes.get(pi.key, PodNotes())
            node = self.binder.bound.get(pi.key, "")
            tried = attempts.get(pi.key, notes.failed)
            if node:
                status, msg, tried = "bound", notes.scheduled, notes.failed + 1
            elif pi.key in waiting:
                node = waiting[pi.key].node
                status, msg = "waiting", f"waiting at Permit on {node} for the rest of gang {pi.gang_key}"
                tried = notes.failed + 1
            elif live.pod.spec.scheduling_gates:
                status = "gated"
                msg = "scheduling gates: " + ", ".join(g.name for g in live.pod.spec.scheduling_gates)
            else:
                status, msg = "pending", notes.last_failure or "not attempted"
            domain = self._domain_of(node, tk) if node else ""
            out.append(
                PodResult(pi.namespace, pi.name, pi.gang_key, status, node, domain, msg, tried, notes.last_failure)
            )
        return out

    def _gang_results(self, pods: list[PodResult]) -> list[GangResult]:
        """Each gang with members in ``pods``: bound, waiting or pending, and why."""
        by_gang: dict[str, list[PodResult]] = {}
        for pr in pods:
            if pr.gang:
                by_gang.setdefault(pr.gang, []).append(pr)
        out = []
        for gk, members in sorted(by_gang.items()):
            ns, name = gk.split("/", 1)
            pg = self.scheduler.pod_group_state.get(ns, name)
            first = next(iter(self.scheduler.pod_group_state.members(gang_key(ns, name))), None)
            tk = self._topology_key(pg, first.pod if first is not None else None)
            ours = {f"{m.namespace}/{m.name}" for m in members}
            already = [
                p
                for p in self.scheduler.pod_group_state.members(gang_key(ns, name))
                if p.key not in ours and p.pod.spec.node_name
            ]
            bound = sum(1 for m in members if m.status == "bound")
            wait = sum(1 for m in members if m.status == "waiting")
            domains = {m.domain for m in members if m.status in ("bound", "waiting")}
            domains |= {self._domain_of(p.pod.spec.node_name, tk) for p in already}
            mm = pg.spec.min_member if pg is not None else None
            if pg is None and first is not None and source_of(name) == "LeaderWorkerSet":
                mm = lws_size(first.pod.metadata)
            if wait == 0 and bound == len(members) and (mm is None or bound + len(already) >= mm):
                status, reason = "bound", ""
            else:
                status = "waiting" if wait else "pending"
                notes = [self.recorder.notes.get(f"{m.namespace}/{m.name}") for m in members]
                latest = max((n for n in notes if n is not None), key=lambda n: n.last_failure_seq, default=None)
                reason = latest.last_failure if latest is not None else ""
                if not reason:
                    reason = next(m.message for m in members if m.status != "bound")
            events = list(self.recorder.gang_events.get(gk, []))
            out.append(
                GangResult(gk, mm, tk, status, len(members), bound, len(already), wait, sorted(domains), reason, events)
            )
        return out

    def _domains(
        self, tk: str, before: ClusterView, after: ClusterView, shape_of: str
    ) -> tuple[DomainTable, dict[str, list[NodeCell]]]:
        """One topology key's domain table and its nodes for the domain map."""
        by: dict[str, list[str]] = {}
        for name in sorted(set(before.nodes) | set(after.nodes)):
            ni = self.scheduler.cache.get_node_info(name)
            d = ni.labels.get(tk, "") if ni is not None else ""
            if d:
                by.setdefault(d, []).append(name)
        gone = NodeState(0, 0, False, ())
        rows, cells = [], {}
        for d in sorted(by):
            names = by[d]
            b = [before.nodes.get(n, gone) for n in names]
            a = [after.nodes.get(n, gone) for n in names]
            rows.append(
                DomainRow(
                    d,
                    len(names),
                    sum(1 for s in b if s.free_node),
                    sum(1 for s in a if s.free_node),
                    sum(s.free for s in b),
                    sum(s.free for s in a),
                    sum(s.capacity for s in a),
                    before.rooms.get(tk, {}).get(d),
                    after.rooms.get(tk, {}).get(d),
                )
            )
            cells[d] = [
                NodeCell(n, max(x.capacity, y.capacity), x.free, y.free, list(x.gangs), list(y.gangs))
                for n, x, y in zip(names, b, a, strict=True)
            ]
        return DomainTable(tk, self.resource, shape_of, rows), cells
