"""The scheduler: its parts wired together, the plugins' Handle, and the loop that pops pods.

Mirrors ``pkg/scheduler/scheduler.go`` (v1.35.4). One :class:`Scheduler` owns

* the backend: the cache (nodes, bound and assumed pods), the scheduling queue and the
  pod-group state (``backend/``);
* one framework per profile, built from the in-tree registry (``plugins/registry.py``);
* the informer event handlers (:class:`~ome_scheduler.eventhandlers.EventHandlers`) and the
  scheduling and binding cycles (:class:`~ome_scheduler.schedule_one.ScheduleOne`).

It is also the plugins' :class:`~ome_scheduler.framework.interface.Handle`: read-only views of
the cache and the pod-group state, and the waiting pods. It does no I/O itself: the API client
reaches it only as the ``binder`` and ``recorder`` ports, so the whole engine runs in unit tests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import anyio

from ome_scheduler.api.core import Namespace, Node, Pod
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.api.workloads import LeaderWorkerSet, PodDisruptionBudget
from ome_scheduler.backend.cache import SchedulerCache
from ome_scheduler.backend.podgroups import PodGroupState
from ome_scheduler.backend.queue import ProfileQueueing, SchedulingQueue
from ome_scheduler.config.load import profile_percentage
from ome_scheduler.config.types import KubeSchedulerConfiguration
from ome_scheduler.eventhandlers import EventHandlers
from ome_scheduler.framework.fence import Fence, FencedApiWriter, FencedBinder
from ome_scheduler.framework.interface import (
    ApiWriter,
    BackgroundTask,
    Binder,
    CycleState,
    EventRecorder,
    FrameworkOptions,
    PodGroupLister,
)
from ome_scheduler.framework.runtime import Framework
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import (
    AffinityTerm,
    GangKey,
    GangPlacement,
    NodeInfo,
    PodInfo,
    PodKey,
    QueuedPodInfo,
    pod_key,
)
from ome_scheduler.framework.waiting_pods import WaitingPod
from ome_scheduler.logs import get_logger
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.dynamicresources.manager import DRAManager
from ome_scheduler.plugins.registry import default_plugins, in_tree_registry
from ome_scheduler.plugins.volumestore import VolumeStore
from ome_scheduler.plugins.workloads import WorkloadStore
from ome_scheduler.schedule_one import ScheduleOne
from ome_scheduler.util.labels import Selector

log = get_logger()


class DiscardRecorder:
    """An :class:`EventRecorder` that writes nothing (configuration checks, offline runs)."""

    def event(
        self, regarding: Pod | Node | PodGroup, *, controller: str, type_: str, reason: str, action: str, note: str
    ) -> None:
        """Drop the event."""

    def pod_scheduled_false(self, pod: Pod, reason: str, message: str, *, clear_nominated: bool = True) -> None:
        """Drop the condition."""

    async def nominate(self, pod: Pod, node: str, abandon: asyncio.Future[Any] | None = None) -> None:
        """Drop the nomination."""


class Scheduler:
    """Owns the backend, the profiles' frameworks, the event handlers and the cycles.

    ``clock`` is the queue's monotonic clock in seconds (backoff and the unschedulable flush);
    ``ome-scheduler simulate`` passes its event loop's simulated time. ``fence`` (with leader
    election) guards every write of the binding cycle and the release of pods allowed at
    Permit (``framework/fence.py``).

    Raises:
        ConfigError: from the constructor, when a profile or plugin argument is invalid.
    """

    def __init__(
        self,
        cfg: KubeSchedulerConfiguration,
        *,
        metrics: Metrics,
        binder: Binder | None,
        recorder: EventRecorder,
        api_writer: ApiWriter | None = None,
        clock: Callable[[], float] = time.monotonic,
        fence: Fence | None = None,
    ) -> None:
        self.cfg = cfg
        self.fence = fence
        if fence is not None:
            # The one seam for fencing: both write ports of the binding cycle, and (through
            # FrameworkOptions) the runtime's release of pods allowed at Permit.
            binder = FencedBinder(binder, fence) if binder is not None else None
            api_writer = FencedApiWriter(api_writer, fence) if api_writer is not None else None
        self.metrics = metrics
        self.recorder = recorder
        self.cache = SchedulerCache()
        self.pod_group_state = PodGroupState(self.cache)
        self.pods: dict[str, PodInfo] = {}
        """The informer's latest PodInfo of every pod, by ``namespace/name``."""
        self.namespaces: dict[str, Namespace] = {}
        self.volumes = VolumeStore(lambda ev, old, new: self.queue.move_all_to_active_or_backoff(ev, old, new))
        """PVs, PVCs, StorageClasses and the CSI objects for the volume plugins; each storage event
        retries the unschedulable pods that registered it."""
        self.dra = DRAManager(lambda ev, old, new: self.queue.move_all_to_active_or_backoff(ev, old, new))
        """ResourceClaims (with assumed and in-flight allocations), ResourceSlices and DeviceClasses
        for DynamicResources; each of their events retries the unschedulable pods that registered it."""
        self.workloads = WorkloadStore()
        """Services, ReplicationControllers, ReplicaSets and StatefulSets (PodTopologySpread's
        default constraints)."""
        self.frameworks: dict[str, Framework] = {}
        self._node_listeners: list[Callable[[Node | None, Node | None], None]] = []
        self.stopping = False
        registry = in_tree_registry()
        for i, profile in enumerate(cfg.profiles):
            opts = FrameworkOptions(
                scheduler_name=profile.scheduler_name,
                metrics=metrics,
                parallelism=cfg.parallelism,
                binder=binder,
                api_writer=api_writer,
                fence=fence,
            )
            fw = Framework(profile, default_plugins(), registry, self, opts, i)
            fw.percentage_of_nodes_to_score = profile_percentage(cfg, profile)
            self.frameworks[profile.scheduler_name] = fw
        self.queue = SchedulingQueue(
            {
                name: ProfileQueueing(fw.events_to_register(), fw.queue_sort.sort_key, fw.run_pre_enqueue)
                for name, fw in self.frameworks.items()
            },
            metrics=metrics,
            initial_backoff=float(cfg.pod_initial_backoff_seconds),
            max_backoff=float(cfg.pod_max_backoff_seconds),
            clock=clock,
        )
        self.handlers = EventHandlers(
            cache=self.cache,
            queue=self.queue,
            pod_groups=self.pod_group_state,
            pods=self.pods,
            namespaces=self.namespaces,
            profiles=self.frameworks,
            recorder=recorder,
            waiting_pod=self.get_waiting_pod,
            node_listeners=self._node_listeners,
            component=cfg.profiles[0].scheduler_name if cfg.profiles else "ome-scheduler",
        )
        self.cycles = ScheduleOne(
            cache=self.cache,
            queue=self.queue,
            frameworks=self.frameworks,
            pods=self.pods,
            recorder=recorder,
            metrics=metrics,
            pod_groups=self.pod_group_state,
        )

    @classmethod
    def check_config(cls, cfg: KubeSchedulerConfiguration) -> None:
        """Build every profile's plugins once, so their arguments are checked before connecting.

        Raises:
            ConfigError: naming the profile, plugin and argument.
        """
        cls(cfg, metrics=Metrics(), binder=None, recorder=DiscardRecorder())

    # ---- Handle ---------------------------------------------------------------------------

    def node_infos(self) -> Sequence[NodeInfo]:
        """Every NodeInfo with a Node object, zones interleaved (``NodeInfos().List()``)."""
        return self.cache.node_infos()

    def get_node_info(self, name: str) -> NodeInfo | None:
        """One node's NodeInfo, or None when the Node object is gone."""
        return self.cache.get_node_info(name)

    def anti_affinity_terms_for(self, labels: Mapping[str, str]) -> Iterator[tuple[AffinityTerm, NodeInfo]]:
        """Required anti-affinity terms of existing pods that may match ``labels`` (a superset)."""
        nodes = self.cache.nodes
        for term, node in self.cache.affinity_index.anti_terms_for(labels):
            ni = nodes.get(node)
            if ni is not None and ni.node is not None:
                yield term, ni

    def pods_with_affinity_score_terms(self) -> Iterator[tuple[PodInfo, NodeInfo]]:
        """Existing pods whose terms can add to an InterPodAffinity score, with their node."""
        nodes = self.cache.nodes
        for pi, node in self.cache.affinity_index.scoring_pods.values():
            ni = nodes.get(node)
            if ni is not None and ni.node is not None:
                yield pi, ni

    def pods_for_selector(self, selector: Selector) -> Iterator[tuple[PodInfo, NodeInfo]]:
        """Existing pods that may match ``selector`` (a superset; all pods without ``key=value``)."""
        cands = self.cache.affinity_index.pods_for(selector)
        if cands is None:
            for ni in self.cache.node_infos():
                for pi in ni.pods.values():
                    yield pi, ni
            return
        nodes = self.cache.nodes
        for key, node in cands.items():
            owner = nodes.get(node)
            if owner is not None and owner.node is not None:
                found = owner.pods.get(key)
                if found is not None:
                    yield found, owner

    def node_changes(self, cursor: int) -> tuple[int, set[str] | None]:
        """Nodes changed since ``cursor`` (None: rebuild from all) and the new cursor."""
        return self.cache.node_changes(cursor)

    def subscribe_node_changes(self, listener: Callable[[Node | None, Node | None], None]) -> None:
        """Call ``listener(old, new)`` after every Node add, update and delete."""
        self._node_listeners.append(listener)

    def pod_groups(self) -> PodGroupLister:
        """The pod-group state (PodGroups, members, placed members)."""
        return self.pod_group_state

    def event_recorder(self) -> EventRecorder:
        """The process's event recorder (a discarding one when only checking a configuration)."""
        return self.recorder

    def report_gang_placement(self, gang: GangKey, placement: GangPlacement | None) -> None:
        """Keep where ``gang`` is in the pod-group state (the leader's status writer publishes it)."""
        self.pod_group_state.set_placement(gang, placement)

    def namespace(self, name: str) -> Namespace | None:
        """A namespace from the informer cache, or None."""
        return self.namespaces.get(name)

    def namespace_names(self) -> Iterable[str]:
        """Every namespace name the informer holds."""
        return list(self.namespaces)

    def volume_store(self) -> VolumeStore:
        """PVs, PVCs and StorageClasses (filled by the storage informers)."""
        return self.volumes

    def dra_manager(self) -> DRAManager:
        """ResourceClaims, ResourceSlices and DeviceClasses (filled by the DRA informers)."""
        return self.dra

    def leader_worker_set(self, namespace: str, name: str) -> LeaderWorkerSet | None:
        """A LeaderWorkerSet from the informer cache (``plugins/workloads.py``), or None."""
        return self.workloads.leader_worker_set(namespace, name)

    def lws_leader_uid(self, pod: Pod) -> str:
        """The leader UID of ``pod``'s LWS group incarnation (``plugins/workloads.py``), or ``""``."""
        return self.workloads.lws_leader_uid(pod)

    def default_spread_selector(self, pod: Pod) -> Selector:
        """``helper.DefaultSelector``: the workload selector of ``pod`` for PodTopologySpread's
        default constraints (``plugins/workloads.py``)."""
        return self.workloads.default_selector(pod)

    def activate(self, pods: Iterable[Pod]) -> None:
        """Move these pods from backoffQ or the unschedulable pods straight to activeQ."""
        self.queue.activate(pods)

    def runs_filter_plugin(self, scheduler_name: str, plugin: str) -> bool:
        """Whether the profile ``scheduler_name`` runs ``plugin`` at Filter (no such profile: False)."""
        fw = self.frameworks.get(scheduler_name)
        return fw is not None and any(pl.name == plugin for pl in fw.filter_plugins)

    def unresolvable_at_prefilter(self, pod: PodInfo, *, skip: str) -> tuple[str, str] | None:
        """The first PreFilter plugin (but ``skip``) of the pod's profile that finds it
        UnschedulableAndUnresolvable now, with its message; a dry run on a throwaway CycleState."""
        fw = self.frameworks.get(pod.pod.spec.scheduler_name)
        if fw is None:
            return None
        state, nodes = CycleState(), self.cache.node_infos()
        for pl in fw.pre_filter_plugins:
            if pl.name == skip:
                continue
            try:
                _, st = pl.pre_filter(state, pod, nodes)
            except Exception:
                continue  # the member's own cycle reports it
            if st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return pl.name, st.message()
        return None

    def retry_after_backoff(self, pod: Pod) -> None:
        """When the in-flight pod's attempt fails, send it to backoffQ, event or not."""
        self.queue.retry_after_backoff(pod_key(pod.metadata))

    def waiting_pods(self) -> Iterable[WaitingPod]:
        """Every pod waiting at Permit, across profiles."""
        for fw in self.frameworks.values():
            yield from fw.iterate_waiting_pods()

    def get_waiting_pod(self, key: PodKey) -> WaitingPod | None:
        """The pod's Permit wait, or None."""
        for fw in self.frameworks.values():
            wp = fw.waiting_pods.get(key)
            if wp is not None:
                return wp
        return None

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        """The informer's latest PodInfo of ``namespace/name``, or None."""
        return self.pods.get(f"{namespace}/{name}")

    def nominated_pods_for_node(self, node: str) -> list[PodInfo]:
        """Our unbound pods nominated to ``node``, less those assumed (counted on the node already)."""
        nominator = self.handlers.nominator
        if not len(nominator):
            return []
        return [pi for pi in nominator.for_node(node) if not self.cache.is_assumed(pi.pod_key)]

    def has_nominated_pods(self) -> bool:
        """Whether any pod is nominated (Filter then counts nominated pods, without shared answers)."""
        return len(self.handlers.nominator) > 0

    def pod_disruption_budgets(self) -> Sequence[PodDisruptionBudget]:
        """Every PodDisruptionBudget the informer holds."""
        return self.workloads.pod_disruption_budgets()

    def _framework_of(self, pod: PodInfo) -> Framework:
        fw = self.frameworks.get(pod.pod.spec.scheduler_name)
        if fw is None:
            raise KeyError(f"no profile {pod.pod.spec.scheduler_name!r}")
        return fw

    def run_filter_with_nominated_pods(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """``RunFilterPluginsWithNominatedPods`` of ``pod``'s profile."""
        return self._framework_of(pod).run_filter_with_nominated_pods(state, pod, node)

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: PodInfo, to_add: PodInfo, node: NodeInfo
    ) -> Status | None:
        """``RunPreFilterExtensionAddPod`` of ``pod``'s profile."""
        return self._framework_of(pod).run_pre_filter_extension_add_pod(state, pod, to_add, node)

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node: NodeInfo
    ) -> Status | None:
        """``RunPreFilterExtensionRemovePod`` of ``pod``'s profile."""
        return self._framework_of(pod).run_pre_filter_extension_remove_pod(state, pod, to_remove, node)

    def nominate(self, pod: PodInfo, node: str) -> None:
        """Nominate ``pod`` to ``node`` in memory, or drop its nomination (``""``)."""
        self.handlers.nominator.add(pod, node)

    # ---- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        """Schedule until the queue closes; yields to the event loop between pods."""
        while not self.stopping:
            q = await self.queue.pop()
            if q is None:
                return
            self.schedule_one(q)
            await asyncio.sleep(0)

    def schedule_one(self, q: QueuedPodInfo) -> None:
        """One scheduling cycle; a bug in it costs this pod's attempt, never the loop.

        The cycle itself turns an exception into a failed attempt with an event and a retry
        (:meth:`ScheduleOne.handle_cycle_exception`); this is the last resort for one raised
        while handling that failure: the pod leaves the queue until its next update.
        """
        try:
            self.cycles.schedule_one(q)
        except Exception as exc:
            log.error(
                "Error scheduling pod; dropping it until it changes", pod=q.pod_info.key, err=repr(exc), exc_info=exc
            )
            self.queue.done(q.pod_info.pod_key)

    def background_tasks(self) -> list[BackgroundTask]:
        """The periodic jobs every profile's plugins declared (GC, gauges, ...)."""
        return [t for fw in self.frameworks.values() for pl in fw.plugins.values() for t in pl.background_tasks()]

    def informer_sync_waits(self) -> dict[str, float]:
        """Informer name -> the longest any plugin wants to wait for it before scheduling."""
        out: dict[str, float] = {}
        for fw in self.frameworks.values():
            for pl in fw.plugins.values():
                for name, seconds in pl.informer_sync_waits().items():
                    out[name] = max(out.get(name, 0.0), seconds)
        return out

    async def run_background_tasks(self) -> None:
        """Run every declared background task until cancelled (leader only)."""
        tasks = self.background_tasks()
        if tasks:
            async with anyio.create_task_group() as tg:
                for t in tasks:
                    tg.start_soon(_every, t)

    async def drain_bindings(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for in-flight binding cycles."""
        await self.cycles.drain(timeout)


async def _every(task: BackgroundTask) -> None:
    """Call ``task.run`` every ``task.interval_seconds``; log and continue on errors."""
    if not task.run_at_start:
        await asyncio.sleep(task.interval_seconds)
    while True:
        try:
            task.run()
        except Exception as exc:
            log.error("background task failed", task=task.name, error=repr(exc))
        await asyncio.sleep(task.interval_seconds)
