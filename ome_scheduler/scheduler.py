"""The scheduling loop: pop a pod, run its scheduling cycle, bind it asynchronously.

Mirrors ``pkg/scheduler/schedule_one.go`` and ``eventhandlers.go`` (v1.35.4):

* ``schedule_one`` runs PreFilter, Filter (on ``numFeasibleNodesToFind`` nodes from a
  rotating start index, the nominated node first), PostFilter on failure, PreScore/Score
  with random tie-breaking among the best nodes, then assumes the pod, runs Reserve and
  Permit. All of that is synchronous on the event loop, so the cache is its snapshot.
* The binding cycle (a task per pod) waits at Permit, runs PreBind and Bind, records the
  ``Scheduled`` event ``Successfully assigned {ns}/{pod} to {node}`` and runs PostBind; a
  failure un-reserves, forgets the assumption and requeues the pod.
* Failures record ``FailedScheduling`` with the FitError text and set ``PodScheduled=False``
  (reason ``Unschedulable`` or ``SchedulerError``).
* Informer events keep the cache and queue current and move parked pods on the cluster
  events their rejector plugins registered.

This class is also the plugins' :class:`~ome_scheduler.framework.interface.Handle`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain, compress
from typing import Any

import msgspec

from ome_scheduler.api.core import Namespace, Node, Pod, PodHead
from ome_scheduler.api.meta import MetaOnly
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.backend.cache import SchedulerCache
from ome_scheduler.backend.queue import ProfileQueueing, SchedulingQueue
from ome_scheduler.config.load import profile_percentage
from ome_scheduler.config.types import KubeSchedulerConfiguration
from ome_scheduler.framework.events import (
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_NODE_ADD,
    EVENT_NODE_DELETE,
    EVENT_UNSCHEDULED_POD_DELETE,
    POD_GROUP,
    ActionType,
    ClusterEvent,
    node_scheduling_properties_change,
    pod_scheduling_properties_change,
)
from ome_scheduler.framework.interface import CycleState, FrameworkOptions
from ome_scheduler.framework.runtime import Diagnosis, FitError, Framework
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import POD_GROUP_LABEL, AffinityTerm, NodeInfo, PodInfo, QueuedPodInfo
from ome_scheduler.framework.waiting_pods import WaitingPod
from ome_scheduler.logs import enabled, get_logger
from ome_scheduler.metrics import Metrics
from ome_scheduler.plugins.gangpack.plugin import OMEGangPack
from ome_scheduler.plugins.registry import default_plugins, in_tree_registry
from ome_scheduler.plugins.volumestore import VolumeStore
from ome_scheduler.util.labels import Selector

_POD_HEAD = msgspec.json.Decoder(PodHead)
_POD_GROUP_HEAD = msgspec.json.Decoder(MetaOnly)
log = get_logger()

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
PLUGIN_METRICS_SAMPLE_PERCENT = 10


class NoNodesAvailable(Exception):
    def __str__(self) -> str:
        return "no nodes available to schedule pods"


class Scheduler:
    """Owns the cache, the queue, the profiles' frameworks and the informer event handlers."""

    def __init__(self, cfg: KubeSchedulerConfiguration, *, metrics: Metrics, binder: Any, recorder: Any) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.recorder = recorder
        self.cache = SchedulerCache()
        self.pods: dict[str, PodInfo] = {}
        self._gang_index: dict[tuple[str, str], dict[str, PodInfo]] = {}
        self.namespaces: dict[str, Namespace] = {}
        self.pod_groups: dict[str, PodGroup] = {}
        self.invalid_pod_groups: dict[str, str] = {}
        """PodGroups that exist but could not be decoded: ``ns/name`` -> error."""
        self.next_start_node_index = 0
        self.frameworks: dict[str, Framework] = {}
        self._binding_tasks: set[asyncio.Task[None]] = set()
        self.stopping = False
        registry = in_tree_registry()
        for i, profile in enumerate(cfg.profiles):
            opts = FrameworkOptions(
                scheduler_name=profile.scheduler_name,
                metrics=metrics,
                parallelism=cfg.parallelism,
                binder=binder,
                api_writer=binder,
            )
            fw = Framework(profile, default_plugins(), registry, self, opts, i)
            fw.percentage_of_nodes_to_score = profile_percentage(cfg, profile)
            self.frameworks[profile.scheduler_name] = fw
        self.gang_plugins = [
            p for fw in self.frameworks.values() for p in fw.plugins.values() if isinstance(p, OMEGangPack)
        ]
        self.queue = SchedulingQueue(
            {
                name: ProfileQueueing(fw.events_to_register(), fw.queue_sort.sort_key, fw.run_pre_enqueue)
                for name, fw in self.frameworks.items()
            },
            metrics=metrics,
            initial_backoff=float(cfg.pod_initial_backoff_seconds),
            max_backoff=float(cfg.pod_max_backoff_seconds),
        )

    # ---- Handle -----------------------------------------------------------------------

    def node_infos(self) -> Sequence[NodeInfo]:
        return self.cache.node_infos()

    def get_node_info(self, name: str) -> NodeInfo | None:
        return self.cache.get_node_info(name)

    def anti_affinity_terms_for(self, labels: Mapping[str, str]) -> Iterator[tuple[AffinityTerm, NodeInfo]]:
        nodes = self.cache.nodes
        for term, node in self.cache.affinity_index.anti_terms_for(labels):
            ni = nodes.get(node)
            if ni is not None and ni.node is not None:
                yield term, ni

    def pods_with_affinity_score_terms(self) -> Iterator[tuple[PodInfo, NodeInfo]]:
        nodes = self.cache.nodes
        for pi, node in self.cache.affinity_index.scoring_pods.values():
            ni = nodes.get(node)
            if ni is not None and ni.node is not None:
                yield pi, ni

    def pods_for_selector(self, selector: Selector) -> Iterator[tuple[PodInfo, NodeInfo]]:
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

    def pods_in_group(self, namespace: str, group: str) -> list[PodInfo]:
        return list(self._gang_index.get((namespace, group), {}).values())

    def placed_members(self, namespace: str, group: str) -> list[tuple[PodInfo, NodeInfo | None]]:
        out: list[tuple[PodInfo, NodeInfo | None]] = []
        for key, node in self.cache.placed_members(namespace, group).items():
            raw = self.cache.nodes.get(node)
            pi = raw.pods.get(key) if raw is not None else None
            if pi is not None:
                out.append((pi, raw if raw is not None and raw.node is not None else None))
        return out

    def node_changes(self, cursor: int) -> tuple[int, set[str] | None]:
        return self.cache.node_changes(cursor)

    def live_gang_keys(self) -> set[str]:
        out = set()
        for (ns, g), members in self._gang_index.items():
            if any(p.pod.metadata.deletion_timestamp is None for p in members.values()):
                out.add(f"{ns}/{g}")
        return out

    def pod_group(self, namespace: str, name: str) -> PodGroup | None:
        return self.pod_groups.get(f"{namespace}/{name}")

    def namespace(self, name: str) -> Namespace | None:
        return self.namespaces.get(name)

    def namespace_names(self) -> Iterable[str]:
        return list(self.namespaces)

    def volume_store(self) -> VolumeStore:
        """PVs, PVCs and StorageClasses for the volume plugins (filled by app.py's informers);
        each storage event retries the unschedulable pods that registered it."""
        vs: VolumeStore | None = self.__dict__.get("_volume_store")
        if vs is None:
            vs = VolumeStore(lambda ev, old, new: self.queue.move_all_to_active_or_backoff(ev, old, new))
            self._volume_store = vs
        return vs

    def activate(self, pods: Iterable[Pod]) -> None:
        self.queue.activate(pods)

    def waiting_pods(self) -> Iterable[WaitingPod]:
        for fw in self.frameworks.values():
            yield from fw.iterate_waiting_pods()

    def get_waiting_pod(self, uid: str) -> WaitingPod | None:
        for fw in self.frameworks.values():
            wp = fw.waiting_pods.get(uid)
            if wp is not None:
                return wp
        return None

    # ---- informer event handlers (eventhandlers.go) -----------------------------------

    def _responsible(self, pod: Pod) -> bool:
        return pod.spec.scheduler_name in self.frameworks

    def _index(self, pi: PodInfo) -> None:
        old = self.pods.get(pi.key)
        if old is not None and old.gang and (old.gang != pi.gang):
            self._gang_index.get((old.namespace, old.gang), {}).pop(pi.key, None)
        self.pods[pi.key] = pi
        if pi.gang:
            self._gang_index.setdefault((pi.namespace, pi.gang), {})[pi.key] = pi

    def _unindex(self, pod: Pod) -> None:
        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        pi = self.pods.pop(key, None)
        g = pod.metadata.labels.get(POD_GROUP_LABEL, "")
        for gang in {g, pi.gang if pi else ""} - {""}:
            members = self._gang_index.get((pod.metadata.namespace, gang))
            if members is not None:
                members.pop(key, None)
                if not members:
                    del self._gang_index[(pod.metadata.namespace, gang)]

    def _ns_labels(self, ns: str) -> dict[str, str]:
        n = self.namespaces.get(ns)
        return dict(n.metadata.labels) if n is not None else {}

    def on_pod_add(self, pod: Pod) -> None:
        pi = PodInfo(pod)
        self._index(pi)
        if pod.spec.node_name:
            self.cache.add_pod(pi)
            self.queue.assigned_pod_added(pod, self._ns_labels(pod.metadata.namespace))
        elif self._responsible(pod):
            self.queue.add(pi)

    def on_pod_update(self, old: Pod, new: Pod) -> None:
        pi = PodInfo(new)
        self._index(pi)
        uid = pi.uid or pi.key
        if new.spec.node_name:
            if not old.spec.node_name:
                self.queue.delete(uid)
                self.cache.add_pod(pi)
                self.queue.assigned_pod_added(new, self._ns_labels(new.metadata.namespace))
                return
            self.cache.update_pod(pi)
            for ev in pod_scheduling_properties_change(new, old):
                self.queue.assigned_pod_updated(old, new, ev, self._ns_labels(new.metadata.namespace))
            return
        if not self._responsible(new):
            return
        if self.cache.is_assumed(uid):
            return
        self.queue.update(old, pi)

    def on_pod_delete(self, pod: Pod) -> None:
        self._unindex(pod)
        uid = pod.metadata.uid or f"{pod.metadata.namespace}/{pod.metadata.name}"
        if pod.spec.node_name and not self.cache.is_assumed(uid):
            self.cache.remove_pod(uid)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod, None)
            return
        if self._responsible(pod):
            self.queue.delete(uid)
            wp = self.get_waiting_pod(uid)
            if wp is not None:
                wp.reject("", "pod is deleted")
            self.queue.move_all_to_active_or_backoff(EVENT_UNSCHEDULED_POD_DELETE, pod, None)

    def on_node_add(self, node: Node) -> None:
        self.cache.add_or_update_node(node)
        self.queue.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node)

    def on_node_update(self, old: Node, new: Node) -> None:
        self.cache.add_or_update_node(new)
        for ev in node_scheduling_properties_change(new, old):
            self.queue.move_all_to_active_or_backoff(ev, old, new)

    def on_node_delete(self, node: Node) -> None:
        self.cache.remove_node(node.metadata.name)
        self.queue.move_all_to_active_or_backoff(EVENT_NODE_DELETE, node, None)

    def on_pod_group_add(self, pg: PodGroup) -> None:
        key = f"{pg.metadata.namespace}/{pg.metadata.name}"
        self.pod_groups[key] = pg
        self.invalid_pod_groups.pop(key, None)
        self._pod_group_event(ClusterEvent(POD_GROUP, ActionType.ADD), None, pg)

    def on_pod_group_update(self, old: PodGroup, new: PodGroup) -> None:
        key = f"{new.metadata.namespace}/{new.metadata.name}"
        self.pod_groups[key] = new
        self.invalid_pod_groups.pop(key, None)
        self._pod_group_event(ClusterEvent(POD_GROUP, ActionType.UPDATE), old, new)

    def on_pod_group_delete(self, pg: PodGroup) -> None:
        key = f"{pg.metadata.namespace}/{pg.metadata.name}"
        self.pod_groups.pop(key, None)
        self.invalid_pod_groups.pop(key, None)
        self._pod_group_event(ClusterEvent(POD_GROUP, ActionType.DELETE), pg, None)

    def on_pod_group_invalid(self, raw: bytes, error: str) -> None:
        """A PodGroup that cannot be read: remember why, so its members' FailedScheduling says so."""
        try:
            md = _POD_GROUP_HEAD.decode(raw).metadata
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        self.invalid_pod_groups[f"{md.namespace}/{md.name}"] = error
        # Wake its members (the queueing hint matches the event object's namespace and name) so
        # their next FailedScheduling says why; the unreadable spec stays out of every cache.
        stand_in = PodGroup(metadata=md)
        self.queue.move_all_to_active_or_backoff(ClusterEvent(POD_GROUP, ActionType.UPDATE), None, stand_in)

    def pod_group_error(self, namespace: str, name: str) -> str | None:
        return self.invalid_pod_groups.get(f"{namespace}/{name}")

    def on_pod_invalid(self, raw: bytes, error: str) -> None:
        """A pod of ours that cannot be read: it is not scheduled, and says why in an event."""
        try:
            head = _POD_HEAD.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return  # not even its name and scheduler are readable
        if self.recorder is None or head.spec.node_name or head.spec.scheduler_name not in self.frameworks:
            return
        md = head.metadata
        self.recorder.event(
            Pod(metadata=md),
            controller=head.spec.scheduler_name,
            type_="Warning",
            reason="FailedScheduling",
            action="Scheduling",
            note=f"pod {md.namespace}/{md.name} cannot be read: {error}",
        )

    def _pod_group_event(self, ev: ClusterEvent, old: PodGroup | None, new: PodGroup | None) -> None:
        self.queue.move_all_to_active_or_backoff(ev, old, new)
        for gp in self.gang_plugins:
            gp.on_pod_group_event(old, new)

    def on_namespace_add(self, ns: Namespace) -> None:
        self.namespaces[ns.metadata.name] = ns

    def on_namespace_update(self, old: Namespace, new: Namespace) -> None:
        self.namespaces[new.metadata.name] = new

    def on_namespace_delete(self, ns: Namespace) -> None:
        self.namespaces.pop(ns.metadata.name, None)

    # ---- the loop ---------------------------------------------------------------------

    async def run(self) -> None:
        """Schedule until cancelled. Yields to the loop between pods."""
        while not self.stopping:
            q = await self.queue.pop()
            if q is None:
                return
            try:
                self.schedule_one(q)
            except Exception as exc:  # never let one pod stop the loop
                log.error("unexpected error scheduling pod", pod=q.pod_info.key, error=repr(exc))
                self.queue.done(q.pod_info.uid or q.pod_info.key)
            await asyncio.sleep(0)

    def schedule_one(self, q: QueuedPodInfo) -> None:
        pi = q.pod_info
        uid = pi.uid or pi.key
        fw = self.frameworks.get(pi.pod.spec.scheduler_name)
        if fw is None:
            self.queue.done(uid)
            return
        live = self.pods.get(pi.key)
        if live is not None and live.uid == pi.uid:
            pi = q.pod_info = live
        if pi.pod.metadata.deletion_timestamp is not None:
            self.recorder.event(
                pi.pod,
                controller=fw.profile_name,
                type_="Warning",
                reason="FailedScheduling",
                action="Scheduling",
                note=f"skip schedule deleting pod: {pi.namespace}/{pi.name}",
            )
            self.queue.done(uid)
            return
        if self.cache.is_assumed(uid) or pi.pod.spec.node_name:
            self.queue.done(uid)
            return
        start = time.perf_counter()
        state = CycleState()
        state.record_plugin_metrics = random.randrange(100) < PLUGIN_METRICS_SAMPLE_PERCENT
        try:
            host = self._schedule_pod(fw, state, pi)
        except FitError as fe:
            self.metrics.scheduling_algorithm_duration.observe(time.perf_counter() - start)
            if fw.post_filter_plugins:
                st = fw.run_post_filter(state, pi, fe.diagnosis.node_to_status)
                fe.diagnosis.post_filter_msg = st.message()
            self._failure(fw, q, Status(Code.UNSCHEDULABLE), start, fit_error=fe)
            return
        except NoNodesAvailable as exc:
            self._failure(fw, q, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, str(exc)), start)
            return
        except Exception as exc:
            log.error("error selecting node for pod", pod=pi.key, error=repr(exc))
            self._failure(fw, q, Status.as_error(exc), start)
            return
        self.metrics.scheduling_algorithm_duration.observe(time.perf_counter() - start)
        assumed = pi.with_node(host)
        try:
            self.cache.assume_pod(assumed, host)
        except ValueError as exc:
            self._failure(fw, q, Status.as_error(exc), start)
            return
        rst = fw.run_reserve(state, assumed, host)
        if rst is not None:
            fw.run_unreserve(state, assumed, host)
            self.cache.forget_pod(uid)
            self._failure(fw, q, rst, start, rejected_on=host)
            return
        pst = fw.run_permit(state, assumed, host)
        if pst is not None and not pst.is_wait():
            fw.run_unreserve(state, assumed, host)
            self.cache.forget_pod(uid)
            self._failure(fw, q, pst, start, rejected_on=host)
            return
        task = asyncio.get_running_loop().create_task(self._binding_cycle(fw, state, q, assumed, host, start))
        self._binding_tasks.add(task)
        task.add_done_callback(self._binding_tasks.discard)

    def num_feasible_nodes_to_find(self, percentage: int | None, num_all: int) -> int:
        """``numFeasibleNodesToFind``: adaptive 50 - n/125 percent, at least 5% and 100 nodes."""
        if num_all < MIN_FEASIBLE_NODES_TO_FIND:
            return num_all
        pct = percentage or 0
        if pct == 0:
            pct = max(50 - num_all // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
        n = num_all * pct // 100
        return max(n, MIN_FEASIBLE_NODES_TO_FIND)

    def _schedule_pod(self, fw: Framework, state: CycleState, pi: PodInfo) -> str:
        all_nodes = self.cache.node_infos()
        if not all_nodes:
            raise NoNodesAvailable()
        diag = Diagnosis()
        result, st, with_nodes = fw.run_pre_filter(state, pi, all_nodes)
        diag.unschedulable_plugins = set(with_nodes)
        if st is not None and not st.is_success():
            if not st.is_rejected():
                raise RuntimeError(st.message())
            diag.node_to_status.absent = st
            diag.pre_filter_msg = st.message()
            diag.add_plugin_status(st)
            raise FitError(pi, len(all_nodes), diag)
        nnn = pi.pod.status.nominated_node_name
        if nnn:
            ni = self.cache.get_node_info(nnn)
            if ni is not None and (result is None or nnn in result):
                if fw.run_filter(state, pi, ni) is None:
                    return nnn
        nodes: Sequence[NodeInfo] = all_nodes
        if result is not None:
            nodes = [n for n in (self.cache.get_node_info(name) for name in result) if n is not None]
            nodes.sort(key=lambda n: n.name)
            diag.node_to_status.absent = Status.unresolvable(
                f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(with_nodes))}]"
            )
        entries: dict[str, list[Any]] | None = None
        if result is None and fw.filters_node_local(state):
            version = (self.cache.version, fw.cache_version(state, pi))
            entries = fw.equivalence.entries(pi.shape, version)
        feasible = self._find_nodes_that_pass_filters(fw, state, pi, diag, nodes, len(all_nodes), entries)
        if not feasible:
            raise FitError(pi, len(all_nodes), diag)
        if len(feasible) == 1:
            return feasible[0].name
        if not fw.has_score_plugins():
            return feasible[0].name
        pst = fw.run_pre_score(state, pi, feasible)
        if pst is not None:
            raise RuntimeError(pst.message())
        if entries is not None and fw.scores_node_local(state):
            totals = fw.run_score_cached(state, pi, feasible, entries)
        else:
            totals = fw.run_score(state, pi, feasible)
        best = max(totals)
        best_i = random.choice(list(compress(range(len(totals)), map(best.__eq__, totals))))
        if enabled(10):
            for n, t in zip(feasible, totals, strict=True):
                log.info("Calculated node's final score for pod", v=10, pod=pi.key, node=n.name, score=t)
        return feasible[best_i].name

    def _find_nodes_that_pass_filters(
        self,
        fw: Framework,
        state: CycleState,
        pi: PodInfo,
        diag: Diagnosis,
        nodes: Sequence[NodeInfo],
        num_all: int,
        entries: dict[str, list[Any]] | None = None,
    ) -> list[NodeInfo]:
        start = time.perf_counter()
        n = len(nodes)
        if n == 0:
            return []
        to_find = self.num_feasible_nodes_to_find(fw.percentage_of_nodes_to_score, n)
        if not fw.has_score_plugins():
            to_find = 1
        feasible: list[NodeInfo] = []
        statuses = diag.node_to_status.statuses
        last_plugin: str | None = None
        last_code: Code | None = None
        idx0 = self.next_start_node_index % n
        processed = 0
        run_filter = fw.run_filter
        get = entries.get if entries is not None else None
        for ni in chain(nodes[idx0:], nodes[:idx0]) if idx0 else nodes:
            processed += 1
            if get is None:
                s = run_filter(state, pi, ni)
            else:
                e = get(ni.name)
                if e is not None and e[0] == ni.generation:
                    s = e[1]
                else:
                    s = run_filter(state, pi, ni)
                    entries[ni.name] = [ni.generation, s, {}, None]  # type: ignore[index]
            if s is None:
                feasible.append(ni)
                if len(feasible) >= to_find:
                    break
            else:
                statuses[ni.name] = s
                # Runs of nodes fail alike; each distinct (plugin, code) is recorded once.
                if s.plugin is not last_plugin or s.code is not last_code:
                    if s.code == Code.ERROR:
                        raise RuntimeError(s.message())
                    diag.add_plugin_status(s)
                    last_plugin, last_code = s.plugin, s.code
        self.next_start_node_index = (self.next_start_node_index + processed) % max(1, num_all)
        code = "Success" if feasible else "Unschedulable"
        self.metrics.framework_extension_point_duration.labels("Filter", code, fw.profile_name).observe(
            time.perf_counter() - start
        )
        return feasible

    async def _binding_cycle(
        self, fw: Framework, state: CycleState, q: QueuedPodInfo, assumed: PodInfo, host: str, start: float
    ) -> None:
        uid = assumed.uid or assumed.key
        try:
            wp = fw.waiting_pods.get(assumed.uid)
            if wp is not None:
                await self.recorder.nominate(q.pod, host, abandon=wp.settled)
                st = await fw.wait_on_permit(assumed)
                if st is not None:
                    if st.is_rejected():
                        diag = Diagnosis()
                        diag.node_to_status.set(host, st)
                        diag.unschedulable_plugins = {st.plugin} if st.plugin else set()
                        self._binding_error(
                            fw, state, q, assumed, host, start, Status(st.code), FitError(assumed, 1, diag)
                        )
                    else:
                        self._binding_error(fw, state, q, assumed, host, start, st, None)
                    return
            self.queue.done(uid)
            st = await fw.run_pre_bind(state, assumed, host)
            if st is None:
                st = await fw.run_bind(state, assumed, host)
            if st is not None and not st.is_success():
                log.info("Failed to bind pod", v=1, pod=assumed.key, error=st.message())
                self._binding_error(fw, state, q, assumed, host, start, st, None)
                return
            self.recorder.event(
                assumed.pod,
                controller=fw.profile_name,
                type_="Normal",
                reason="Scheduled",
                action="Binding",
                note=f"Successfully assigned {assumed.namespace}/{assumed.name} to {host}",
            )
            elapsed = time.perf_counter() - start
            log.info("Successfully bound pod to node", v=2, pod=assumed.key, node=host)
            self.metrics.schedule_attempts.labels("scheduled", fw.profile_name).inc()
            self.metrics.scheduling_attempt_duration.labels("scheduled", fw.profile_name).observe(elapsed)
            self.metrics.pod_scheduling_attempts.observe(q.attempts)
            if q.initial_attempt_timestamp is not None:
                label = "15+" if q.attempts >= 15 else str(q.attempts)
                self.metrics.pod_scheduling_sli_duration.labels(label).observe(
                    time.time() - q.initial_attempt_timestamp
                )
            fw.run_post_bind(state, assumed, host)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("binding cycle failed", pod=assumed.key, error=repr(exc))
            self._binding_error(fw, state, q, assumed, host, start, Status.as_error(exc), None)

    def _binding_error(
        self,
        fw: Framework,
        state: CycleState,
        q: QueuedPodInfo,
        assumed: PodInfo,
        host: str,
        start: float,
        st: Status,
        fit_error: FitError | None,
    ) -> None:
        """``handleBindingCycleError``: unreserve, forget, wake others, requeue this pod."""
        uid = assumed.uid or assumed.key
        fw.run_unreserve(state, assumed, host)
        if self.cache.forget_pod(uid):
            self.queue.move_all_to_active_or_backoff(
                EVENT_ASSIGNED_POD_DELETE,
                assumed.pod,
                None,
                precheck=lambda other: (other.pod_info.uid or other.pod_info.key) != uid,
            )
        self._failure(fw, q, st, start, fit_error=fit_error)

    def _failure(
        self,
        fw: Framework,
        q: QueuedPodInfo,
        st: Status,
        start: float,
        *,
        fit_error: FitError | None = None,
        rejected_on: str | None = None,
    ) -> None:
        """``handleSchedulingFailure``: metrics, requeue, FailedScheduling event, condition."""
        pi = q.pod_info
        uid = pi.uid or pi.key
        if rejected_on is not None and st.is_rejected() and fit_error is None:
            diag = Diagnosis()
            diag.node_to_status.set(rejected_on, st)
            diag.add_plugin_status(st)
            fit_error = FitError(pi, 1, diag)
        rejected = fit_error is not None or st.is_rejected()
        reason = "Unschedulable" if rejected else "SchedulerError"
        result = "unschedulable" if rejected else "error"
        elapsed = time.perf_counter() - start
        self.metrics.schedule_attempts.labels(result, fw.profile_name).inc()
        self.metrics.scheduling_attempt_duration.labels(result, fw.profile_name).observe(elapsed)
        if fit_error is not None:
            q.unschedulable_plugins = set(fit_error.diagnosis.unschedulable_plugins)
            q.pending_plugins = set(fit_error.diagnosis.pending_plugins)
            msg = str(fit_error)
        else:
            q.unschedulable_plugins = {st.plugin} if st.is_rejected() and st.plugin else set()
            q.pending_plugins = set()
            msg = st.message()
        log.info(
            "Unable to schedule pod; no fit; waiting" if rejected else "Error scheduling pod; retrying",
            v=2,
            pod=pi.key,
            err=msg,
        )
        live = self.pods.get(pi.key)
        if live is None or live.uid != pi.uid:
            self.queue.done(uid)
        elif live.pod.spec.node_name:
            self.queue.done(uid)
        else:
            q.pod_info = live
            self.queue.add_unschedulable_if_not_present(q)
        pod = live.pod if live is not None else pi.pod
        self.recorder.event(
            pod, controller=fw.profile_name, type_="Warning", reason="FailedScheduling", action="Scheduling", note=msg
        )
        self.recorder.pod_scheduled_false(pod, reason, msg)

    async def gc_loop(self) -> None:
        """Run each OMEGangPack's GC every ``gcIntervalSeconds``."""
        if not self.gang_plugins:
            return
        interval = min(p.args.gc_interval_seconds for p in self.gang_plugins if p.args.gc_interval_seconds)
        while True:
            await asyncio.sleep(interval)
            for p in self.gang_plugins:
                try:
                    p.gc()
                except Exception as exc:
                    log.error("gang GC failed", error=repr(exc))

    async def domain_metrics_loop(self, interval: float = 10.0) -> None:
        """Refresh the per-domain fragmentation gauges every ``interval`` seconds (leader only)."""
        while self.gang_plugins:
            for p in self.gang_plugins:
                try:
                    p.refresh_domain_gauges()
                except Exception as exc:
                    log.error("domain gauge refresh failed", error=repr(exc))
            await asyncio.sleep(interval)

    async def drain_bindings(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for in-flight binding cycles."""
        if self._binding_tasks:
            await asyncio.wait(list(self._binding_tasks), timeout=timeout)
