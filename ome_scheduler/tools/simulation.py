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

Preemption runs when the configuration enables it (DefaultPreemption, OMEGangPack's
``preemption: true``): ``MemoryWriter`` (same module) deletes each victim as the API server and
kubelet would, terminating at once and gone after its grace period on the simulated clock; the
result lists the evictions.

Deliberate limits: pods whose claims need binding or provisioning fail PreBind (nothing binds
volumes or ResourceClaims here); status patches (``PodScheduled``, ``nominatedNodeName``,
``DisruptionTarget``) are recorded but not fed back, as no queueing hint registers them.

The result (:class:`SimulationResult`) says where each pod would bind, which gangs stay
pending and why (their members' last ``FailedScheduling`` message), and the room of every
domain before and after (:class:`DomainRow`); :mod:`ome_scheduler.tools.report` prints it
as text or JSON, :mod:`ome_scheduler.tools.domainmap` draws it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from ome_scheduler.api.core import Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, StorageClass
from ome_scheduler.api.meta import ObjectMeta
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.api.snapshot import ClusterSnapshot, SnapshotError
from ome_scheduler.api.storage import CSIDriver, CSINode, CSIStorageCapacity, VolumeAttachment
from ome_scheduler.api.workloads import (
    LeaderWorkerSet,
    LeaderWorkerSetSpec,
    ReplicaSet,
    ReplicationController,
    Service,
    StatefulSet,
)
from ome_scheduler.config.pluginargs import OMEGangPackArgs
from ome_scheduler.config.types import KubeSchedulerConfiguration
from ome_scheduler.framework.types import PodInfo
from ome_scheduler.metrics import Metrics
from ome_scheduler.scheduler import Scheduler
from ome_scheduler.tools.inputs import stored
from ome_scheduler.tools.outcome import OutcomeReader, accelerator_of
from ome_scheduler.tools.report import SimulationResult
from ome_scheduler.tools.standins import CapturingRecorder, MemoryBinder, MemoryWriter
from ome_scheduler.tools.virtualtime import VirtualTimeLoop
from ome_scheduler.util.timestamps import now_rfc3339

GANG_PLUGIN = "OMEGangPack"
DEFAULT_MAX_SECONDS = 3600.0
"""Simulated seconds after which a simulation that has not settled stops (``--max-seconds``)."""


class Simulation(OutcomeReader):
    """One what-if run: build the scheduler, replay ``snapshot`` and ``added``, run to quiescence.

    Args:
        cfg: the scheduler configuration (the chart's ConfigMap, or the built-in default).
        snapshot: the cluster state (``ome-scheduler snapshot``).
        added: extra objects (Pods, PodGroups, Nodes, Namespaces, volumes), applied in order
            after the snapshot, at simulated time 0. A Node, PodGroup or Namespace that exists
            replaces it (an update); a Pod that exists is an error.
        later: pods a workload's controller creates once other pods are bound (a StatefulSet's
            next ordinal, a LeaderWorkerSet's workers with ``LeaderReady``): (the ``ns/name``
            keys that must be bound, the pods, the workload), from
            :func:`~ome_scheduler.tools.inputs.read_manifests`.
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
        later: Sequence[tuple[tuple[str, ...], Sequence[Pod], str]] = (),
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
        self.writer = MemoryWriter(lambda: self.scheduler, self.loop)
        self.warnings: list[str] = []
        n = len(self.added)
        self.later = [
            (after, [stored(p, created, n + i) for i, p in enumerate(pods)], source) for after, pods, source in later
        ]
        """Pods controllers create once others are bound: (those ``ns/name`` keys, the pods, the
        workload); released by :meth:`_release_later` when the loop would go idle."""
        self._targets: list[PodInfo] = []
        self.scheduler = Scheduler(
            cfg,
            metrics=Metrics(),
            binder=self.binder,
            recorder=self.recorder,
            api_writer=self.writer,
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
        self._leader_ready_sets()

    def _leader_ready_sets(self) -> None:
        """A LeaderWorkerSet whose workers come later (``later``) is ``LeaderReady``: the store
        gets it as its informer would, so OMEGangPack lets the leader bind first (design §2.1)."""
        name_label = "leaderworkerset.sigs.k8s.io/name"
        for _, pods, _ in self.later:
            for p in pods:
                name = p.metadata.labels.get(name_label, "")
                if name:
                    meta = ObjectMeta(name=name, namespace=p.metadata.namespace)
                    lws = LeaderWorkerSet(metadata=meta, spec=LeaderWorkerSetSpec(startup_policy="LeaderReady"))
                    self.scheduler.workloads.on_lws_add(lws)

    # ---- replay ------------------------------------------------------------------------

    def replay(self) -> None:
        """Feed the snapshot through the informer event handlers, as the informers' first lists
        would (``ome-scheduler explain`` builds its offline engine this way)."""
        self._replay_snapshot()

    def _replay_snapshot(self) -> None:
        """The informers' initial lists: namespaces, nodes, storage, workloads, DRA objects, PodGroups, then pods
        (bound ones first, so a pending pod's first cycle already sees every placed pod)."""
        h = self.scheduler.handlers
        vol = self.scheduler.volumes
        wl = self.scheduler.workloads
        dra = self.scheduler.dra
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
            (snap.device_classes, dra.on_class_add),
            (snap.resource_slices, dra.on_slice_add),
            (snap.resource_claims, dra.on_claim_add),
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
                if obj.spec.priority is None and obj.spec.priority_class_name:
                    self.warnings.append(
                        f"pod {obj.metadata.namespace}/{obj.metadata.name} names priorityClassName "
                        f"{obj.spec.priority_class_name!r} without spec.priority: simulated with priority 0 "
                        "(simulate reads no PriorityClasses; set spec.priority as admission would)"
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
        if len(q.active) or len(q.backoff) or len(q.gang_backoff) or len(q.error_backoff) or self.binder.in_flight:
            return False
        if self.writer.terminating:  # a preemption's victims are still leaving
            return False
        parked = set()
        for wp in self.scheduler.waiting_pods():
            if wp.done():
                return False
            parked.add(wp.key)
        # A pod waiting at Permit is still "in flight" for the queue (its cycle ends after Permit).
        return len(self.scheduler.cycles.binding_tasks) == len(parked) and parked.issuperset(q.in_flight)

    def _release_later(self) -> bool:
        """Create the pods whose controller waits for pods now bound; returns whether any were."""
        ready = [w for w in self.later if all(k in self.binder.bound for k in w[0])]
        if not ready:
            return False
        h = self.scheduler.handlers
        for w in ready:
            self.later.remove(w)
            for p in w[1]:
                h.on_pod_add(p)
                pi = self.scheduler.pods.get(f"{p.metadata.namespace}/{p.metadata.name}")
                if pi is not None:
                    self._targets.append(pi)
        return True

    def _on_idle(self, timeout: float | None) -> bool:
        """Called when the loop would let time pass: create the pods controllers would create now,
        else stop here when settled or out of time."""
        done = self._done
        if done is None or done.done():
            return False
        if self._release_later():
            return True
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
        targets = self._targets = [
            pi
            for k, pi in sch.pods.items()
            if not pi.pod.spec.node_name
            and pi.pod.spec.scheduler_name in sch.frameworks
            and (k not in already or not self._was_bound(k))
        ]
        self._start = self.writer.start = self.loop.now
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
            for after, pods, source in self.later:
                waiting = [k for k in after if k not in self.binder.bound]
                names = ", ".join(p.metadata.name for p in pods)
                self.warnings.append(
                    f"{source}: {names} never created: its controller waits for {', '.join(waiting)} to run"
                )
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
