"""The simulation: the real scheduler engine over a snapshot plus what-if objects.

Answers "if this gang arrives now, does it fit, where, and what is left?" offline. The
:class:`Simulation` builds the real :class:`~ome_scheduler.scheduler.Scheduler` (the same
cache, queue, plugins, OMEGangPack's pins and Permit gate, the same configuration file) and
drives it exactly as the process does, through the informer event handlers
(``scheduler.handlers``), with three stand-ins for the API server:

* ``MemoryBinder`` (:mod:`ome_scheduler.tools.standins`): a Binding succeeds at once and is
  confirmed the way the informer confirms it, by feeding the bound pod back through
  ``handlers.on_pod_update``;
* ``CapturingRecorder`` (same module): keeps each pod's ``FailedScheduling`` and ``Scheduled``
  notes;
* ``VirtualTimeLoop`` (:mod:`ome_scheduler.tools.virtualtime`): an asyncio event loop on a
  simulated clock. Scheduling takes no simulated time; when nothing is ready to run, the clock
  jumps to the next timer (backoff flushes, Permit timeouts, the gang GC), so ten minutes of
  Permit wait cost microseconds.

The snapshot (:mod:`ome_scheduler.api.snapshot`) is replayed first (namespaces, nodes,
storage, PodGroups, then pods: bound ones fill the cache, pending ones of this scheduler's
profiles are queued), then the added manifests in file order, then the loop runs until the
scheduler is *quiescent*: no pod in activeQ or backoffQ, no scheduling cycle or binding in
flight, every remaining binding parked at Permit. What is left then needs a cluster change
(or the 5-minute retry of unschedulable pods) to move. ``settle_seconds`` keeps the clock
running at least that long first, so Permit timeouts can fire; ``max_seconds`` bounds a
simulation that never settles (a gang that keeps timing out and retrying).

Deliberate limits: pods whose claims need binding or provisioning fail PreBind (nothing binds
volumes here); status patches (``PodScheduled``, ``nominatedNodeName``) are recorded but not
fed back, as no queueing hint registers them.

The result (:class:`SimulationResult`) says where each pod would bind, which gangs stay
pending and why (their members' last ``FailedScheduling`` message), and the room of every
domain before and after (:class:`DomainRow`); :mod:`ome_scheduler.tools.report` prints it
as text or JSON, :mod:`ome_scheduler.tools.domainmap` draws it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ome_scheduler.api.core import Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, StorageClass
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.api.snapshot import ClusterSnapshot, SnapshotError
from ome_scheduler.api.storage import CSIDriver, CSINode, CSIStorageCapacity, VolumeAttachment
from ome_scheduler.api.workloads import ReplicaSet, ReplicationController, Service, StatefulSet
from ome_scheduler.config.pluginargs import OMEGangPackArgs
from ome_scheduler.config.types import KubeSchedulerConfiguration
from ome_scheduler.framework.types import POD_GROUP_LABEL, NodeInfo, PodInfo, Resource, gang_key
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.gangpack.fit import member_capacity, one_per_node, template_signature
from ome_scheduler.plugins.gangpack.gang import topology_key_of
from ome_scheduler.plugins.gangpack.metrics import is_free_node
from ome_scheduler.plugins.gangpack.placement import GangPlanner, group_by_domain
from ome_scheduler.scheduler import Scheduler
from ome_scheduler.tools.inputs import stored
from ome_scheduler.tools.report import DomainRow, DomainTable, GangResult, NodeCell, PodResult, SimulationResult
from ome_scheduler.tools.standins import CapturingRecorder, MemoryBinder, NoVolumeWriter, PodNotes
from ome_scheduler.tools.virtualtime import VirtualTimeLoop
from ome_scheduler.util.timestamps import now_rfc3339

GANG_PLUGIN = "OMEGangPack"
DEFAULT_MAX_SECONDS = 3600.0
"""Simulated seconds after which a simulation that has not settled stops (``--max-seconds``)."""


def _label(key: str) -> Callable[[NodeInfo], str]:
    return lambda n: n.labels.get(key, "")


def _gang_order(p: Pod) -> tuple[str, str, str]:
    return (p.metadata.namespace, p.metadata.labels.get(POD_GROUP_LABEL, ""), p.metadata.name)


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


class Simulation:
    """One what-if run: build the scheduler, replay ``snapshot`` and ``added``, run to quiescence.

    Args:
        cfg: the scheduler configuration (the chart's ConfigMap, or the built-in default).
        snapshot: the cluster state (``ome-scheduler snapshot``).
        added: extra objects (Pods, PodGroups, Nodes, Namespaces, volumes), applied in order
            after the snapshot, at simulated time 0. A Node, PodGroup or Namespace that exists
            replaces it (an update); a Pod that exists is an error.
        settle_seconds: keep the clock running at least this long (Permit timeouts fire).
        max_seconds: stop a simulation that has not settled after this many simulated seconds.
        resource: what the domain tables count; default: :func:`accelerator_of` the nodes.
        seed: seeds Python's ``random`` (ties between equally scored nodes, as kube-scheduler's
            ``selectHost``, are broken at random), so a run is repeatable; None leaves it alone.

    Raises:
        ConfigError: an invalid profile or plugin argument.
        SnapshotError: an added pod exists in the snapshot already.
    """

    def __init__(
        self,
        cfg: KubeSchedulerConfiguration,
        snapshot: ClusterSnapshot,
        added: Sequence[Any] = (),
        *,
        settle_seconds: float = 0.0,
        max_seconds: float = DEFAULT_MAX_SECONDS,
        resource: str | None = None,
        seed: int | None = 0,
    ) -> None:
        self.cfg = cfg
        self.seed = seed
        self.snapshot = snapshot
        created = snapshot.metadata.taken_at or now_rfc3339()
        self.added = [stored(o, created, i) for i, o in enumerate(added)]
        existing = {f"{p.metadata.namespace}/{p.metadata.name}" for p in snapshot.pods}
        for o in self.added:
            if isinstance(o, Pod) and f"{o.metadata.namespace}/{o.metadata.name}" in existing:
                raise SnapshotError(f"pod {o.metadata.namespace}/{o.metadata.name} already exists in the snapshot")
        self.settle_seconds = settle_seconds
        self.max_seconds = max(max_seconds, settle_seconds)
        self.resource = resource or accelerator_of([*snapshot.nodes, *(o for o in self.added if isinstance(o, Node))])
        self.loop = VirtualTimeLoop()
        self.recorder = CapturingRecorder(self.loop.time)
        self.binder = MemoryBinder(lambda: self.scheduler)
        self.warnings: list[str] = []
        self.scheduler = Scheduler(
            cfg,
            metrics=Metrics(),
            binder=self.binder,
            recorder=self.recorder,
            api_writer=NoVolumeWriter(),
            clock=self.loop.time,
        )
        self.gang_args: OMEGangPackArgs | None = None
        for fw in self.scheduler.frameworks.values():
            args = getattr(fw.plugins.get(GANG_PLUGIN), "args", None)
            if isinstance(args, OMEGangPackArgs):
                self.gang_args = args
                break
        self._settled = False
        self._done: asyncio.Future[bool] | None = None
        self._start = 0.0

    # ---- replay ------------------------------------------------------------------------

    def replay(self) -> None:
        """Feed the snapshot through the informer event handlers, as the informers' first lists
        would (``ome-scheduler explain`` builds its offline engine this way)."""
        self._replay_snapshot()

    def _replay_snapshot(self) -> None:
        """The informers' initial lists: namespaces, nodes, storage, PodGroups, then pods
        (bound ones first, so a pending pod's first cycle already sees every placed pod)."""
        h = self.scheduler.handlers
        vol = self.scheduler.volumes
        wl = self.scheduler.workloads
        snap = self.snapshot
        feeds: list[tuple[Sequence[Any], Callable[[Any], None]]] = [
            (snap.namespaces, h.on_namespace_add),
            (snap.nodes, h.on_node_add),
            (snap.storage_classes, vol.on_class_add),
            (snap.persistent_volumes, vol.on_pv_add),
            (snap.persistent_volume_claims, vol.on_pvc_add),
            (snap.csi_nodes, vol.on_csinode_add),
            (snap.volume_attachments, vol.on_attachment_add),
            (snap.csi_drivers, vol.on_csidriver_add),
            (snap.csi_storage_capacities, vol.on_capacity_add),
            (snap.services, wl.on_service_add),
            (snap.replication_controllers, wl.on_rc_add),
            (snap.replica_sets, wl.on_replicaset_add),
            (snap.stateful_sets, wl.on_statefulset_add),
            (snap.pod_groups, h.on_pod_group_add),
        ]
        for objects, add in feeds:
            for obj in objects:
                add(obj)
        for pod in sorted(snap.pods, key=lambda p: not p.spec.node_name):
            if pod.status.phase not in ("Succeeded", "Failed"):
                h.on_pod_add(pod)

    def _apply_added(self) -> None:
        """The added objects as watch events, in order."""
        h = self.scheduler.handlers
        vol = self.scheduler.volumes
        wl = self.scheduler.workloads
        nodes = {n.metadata.name: n for n in self.snapshot.nodes}
        groups = {(g.metadata.namespace, g.metadata.name): g for g in self.snapshot.pod_groups}
        namespaces = {n.metadata.name: n for n in self.snapshot.namespaces}
        for obj in self.added:
            if isinstance(obj, Pod):
                if not obj.spec.node_name and obj.spec.scheduler_name not in self.scheduler.frameworks:
                    self.warnings.append(
                        f"pod {obj.metadata.namespace}/{obj.metadata.name} has schedulerName "
                        f"{obj.spec.scheduler_name!r}, which this configuration does not serve: it is not scheduled"
                    )
                h.on_pod_add(obj)
            elif isinstance(obj, PodGroup):
                key = (obj.metadata.namespace, obj.metadata.name)
                old_pg = groups.get(key)
                h.on_pod_group_update(old_pg, obj) if old_pg is not None else h.on_pod_group_add(obj)
                groups[key] = obj
            elif isinstance(obj, Node):
                old_node = nodes.get(obj.metadata.name)
                h.on_node_update(old_node, obj) if old_node is not None else h.on_node_add(obj)
                nodes[obj.metadata.name] = obj
            elif isinstance(obj, Namespace):
                old_ns = namespaces.get(obj.metadata.name)
                h.on_namespace_update(old_ns, obj) if old_ns is not None else h.on_namespace_add(obj)
                namespaces[obj.metadata.name] = obj
            elif isinstance(obj, PersistentVolume):
                vol.on_pv_add(obj)
            elif isinstance(obj, PersistentVolumeClaim):
                vol.on_pvc_add(obj)
            elif isinstance(obj, StorageClass):
                vol.on_class_add(obj)
            elif isinstance(obj, CSINode):
                old_cn = vol.csi_node(obj.metadata.name)
                vol.on_csinode_update(old_cn, obj) if old_cn is not None else vol.on_csinode_add(obj)
            elif isinstance(obj, VolumeAttachment):
                vol.on_attachment_add(obj)
            elif isinstance(obj, CSIDriver):
                vol.on_csidriver_add(obj)
            elif isinstance(obj, CSIStorageCapacity):
                vol.on_capacity_add(obj)
            elif isinstance(obj, Service):
                wl.on_service_add(obj)
            elif isinstance(obj, ReplicationController):
                wl.on_rc_add(obj)
            elif isinstance(obj, ReplicaSet):
                wl.on_replicaset_add(obj)
            elif isinstance(obj, StatefulSet):
                wl.on_statefulset_add(obj)

    # ---- quiescence -----------------------------------------------------------------------

    def quiescent(self) -> bool:
        """Nothing can move without a cluster change or a timer: no pod in activeQ, backoffQ or
        a cycle, no Binding unconfirmed, every binding cycle parked at Permit."""
        q = self.scheduler.queue
        if len(q.active) or len(q.backoff) or len(q.error_backoff) or self.binder.in_flight:
            return False
        parked = set()
        for wp in self.scheduler.waiting_pods():
            if wp.done():
                return False
            parked.add(wp.key)
        # A pod waiting at Permit is still "in flight" for the queue (its cycle ends after Permit).
        return len(self.scheduler.cycles.binding_tasks) == len(parked) and parked.issuperset(q.in_flight)

    def _on_idle(self, timeout: float | None) -> bool:
        """Called when the loop would let time pass: stop here when settled or out of time."""
        done = self._done
        if done is None or done.done():
            return False
        elapsed = self.loop.now - self._start
        if elapsed >= self.settle_seconds and self.quiescent():
            done.set_result(True)
            return True
        if timeout is None or elapsed + timeout > self.max_seconds:
            done.set_result(False)
            return True
        return False

    # ---- run ----------------------------------------------------------------------------

    def run(self) -> SimulationResult:
        """Run the simulation on its own event loop (blocking) and return what it found."""
        t0 = time.perf_counter()
        if self.seed is not None:
            random.seed(self.seed)
        with asyncio.Runner(loop_factory=lambda: self.loop) as runner:
            result = runner.run(self._main())
        result.wall_seconds = round(time.perf_counter() - t0, 3)
        return result

    async def _main(self) -> SimulationResult:
        sch = self.scheduler
        self._replay_snapshot()
        shapes = self._gang_shapes()
        before = self._view(shapes)
        already = set(sch.pods)
        self._apply_added()
        targets = [
            pi
            for k, pi in sch.pods.items()
            if not pi.pod.spec.node_name
            and pi.pod.spec.scheduler_name in sch.frameworks
            and (k not in already or not self._was_bound(k))
        ]
        self._start = self.loop.now
        self._done = self.loop.create_future()
        self.loop.on_idle = self._on_idle
        tasks = [
            asyncio.ensure_future(sch.run()),
            asyncio.ensure_future(sch.queue.run()),
            asyncio.ensure_future(sch.run_background_tasks()),
        ]
        try:
            self._settled = await self._done
            elapsed = self.loop.now - self._start
            result = self._result(targets, before, self._view(shapes), shapes, elapsed)
        finally:
            self.loop.on_idle = None
            sch.stopping = True
            sch.queue.close()
            pending = [*tasks, *sch.cycles.binding_tasks]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        return result

    def _was_bound(self, key: str) -> bool:
        return any(f"{p.metadata.namespace}/{p.metadata.name}" == key and p.spec.node_name for p in self.snapshot.pods)

    # ---- reading the outcome ---------------------------------------------------------------

    def _topology_key(self, pg: PodGroup | None) -> str:
        """A gang's domain label (the PodGroup's annotation, else the configured key)."""
        if self.gang_args is None:
            return ""
        return topology_key_of(pg, self.gang_args) if pg is not None else self.gang_args.topology_key

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
                g = p.metadata.labels.get(POD_GROUP_LABEL, "")
                if not g:
                    continue
                tk = self._topology_key(groups.get((p.metadata.namespace, g)))
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
            for x in [*q.active.values(), *q.backoff.values(), *q.error_backoff.values(), *q.unschedulable.values()]
        }
        out = []
        for pi in sorted(targets, key=lambda p: p.key):
            live = sch.pods.get(pi.key)
            if live is None:
                continue  # deleted meanwhile (an added object cannot do that, but stay safe)
            pg = sch.pod_group_state.get(pi.namespace, pi.gang) if pi.gang else None
            tk = self._topology_key(pg)
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
            tk = self._topology_key(pg)
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
