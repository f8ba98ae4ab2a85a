"""The scheduling cycle and the binding cycle of one pod.

Mirrors ``pkg/scheduler/schedule_one.go`` (v1.35.4):

* :meth:`ScheduleOne.scheduling_cycle` runs PreFilter, Filter (on ``numFeasibleNodesToFind``
  nodes from a rotating start index, the nominated node first), PostFilter on failure,
  PreScore/Score with random tie-breaking among the best nodes, then assumes the pod and runs
  Reserve and Permit. All of it is synchronous on the event loop, so the cache itself is the
  cycle's snapshot: no informer event can land between PreFilter and Permit.
* :meth:`ScheduleOne.binding_cycle` (a task per pod) waits at Permit, runs PreBind and Bind,
  records the ``Scheduled`` event ``Successfully assigned {ns}/{pod} to {node}`` and runs
  PostBind.
* :meth:`ScheduleOne.handle_scheduling_failure` records ``FailedScheduling`` with the
  FitError text, sets ``PodScheduled=False`` (reason ``Unschedulable`` or ``SchedulerError``)
  and requeues the pod; :meth:`ScheduleOne.handle_binding_cycle_error` first un-reserves the
  pod and forgets its assumption.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping, Sequence
from itertools import chain, compress

from ome_scheduler.backend.cache import SchedulerCache
from ome_scheduler.backend.queue import SchedulingQueue
from ome_scheduler.framework.equivalence import EntryTable, EquivalenceEntry
from ome_scheduler.framework.events import EVENT_ASSIGNED_POD_DELETE
from ome_scheduler.framework.interface import CycleState, EventRecorder
from ome_scheduler.framework.runtime import Diagnosis, FitError, Framework
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo, QueuedPodInfo
from ome_scheduler.logs import enabled, get_logger
from ome_scheduler.metrics import Metrics

log = get_logger()

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
PLUGIN_METRICS_SAMPLE_PERCENT = 10


class NoNodesAvailable(Exception):
    """``ErrNoNodesAvailable``: the cluster has no nodes at all."""

    def __str__(self) -> str:
        return "no nodes available to schedule pods"


def num_feasible_nodes_to_find(percentage: int | None, num_all: int) -> int:
    """``numFeasibleNodesToFind``: how many feasible nodes to look for before scoring.

    All nodes below 100; else ``percentage`` percent (0 or None: adaptive ``50 - n/125``,
    at least 5%), and at least 100 nodes.
    """
    if num_all < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all
    pct = percentage or 0
    if pct == 0:
        pct = max(50 - num_all // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    n = num_all * pct // 100
    return max(n, MIN_FEASIBLE_NODES_TO_FIND)


class ScheduleOne:
    """Runs each popped pod through its profile's framework and binds it in the background."""

    def __init__(
        self,
        *,
        cache: SchedulerCache,
        queue: SchedulingQueue,
        frameworks: Mapping[str, Framework],
        pods: Mapping[str, PodInfo],
        recorder: EventRecorder,
        metrics: Metrics,
    ) -> None:
        self.cache = cache
        self.queue = queue
        self.frameworks = frameworks
        self.pods = pods
        self.recorder = recorder
        self.metrics = metrics
        self.next_start_node_index = 0
        """Where the next Filter pass starts, so successive pods spread their search."""
        self.binding_tasks: set[asyncio.Task[None]] = set()

    def schedule_one(self, q: QueuedPodInfo) -> None:
        """``ScheduleOne``: one scheduling cycle; on success a binding-cycle task is started."""
        pi = q.pod_info
        fw = self.frameworks.get(pi.pod.spec.scheduler_name)
        if fw is None:
            self.queue.done(pi.pod_key)
            return
        live = self.pods.get(pi.key)
        if live is not None and live.uid == pi.uid:
            pi = q.pod_info = live  # the informer's latest version of this pod
        if pi.pod.metadata.deletion_timestamp is not None:
            self.recorder.event(
                pi.pod,
                controller=fw.profile_name,
                type_="Warning",
                reason="FailedScheduling",
                action="Scheduling",
                note=f"skip schedule deleting pod: {pi.namespace}/{pi.name}",
            )
            self.queue.done(pi.pod_key)
            return
        if self.cache.is_assumed(pi.pod_key) or pi.pod.spec.node_name:
            self.queue.done(pi.pod_key)  # already on its way to a node (``skipPodSchedule``)
            return
        start = time.perf_counter()
        state = CycleState()
        state.record_plugin_metrics = random.randrange(100) < PLUGIN_METRICS_SAMPLE_PERCENT
        placed = self.scheduling_cycle(fw, state, q, start)
        if placed is None:
            return
        assumed, host = placed
        task = asyncio.get_running_loop().create_task(self.binding_cycle(fw, state, q, assumed, host, start))
        self.binding_tasks.add(task)
        task.add_done_callback(self.binding_tasks.discard)

    def scheduling_cycle(
        self, fw: Framework, state: CycleState, q: QueuedPodInfo, start: float
    ) -> tuple[PodInfo, str] | None:
        """``schedulingCycle``: pick a node, assume the pod there, Reserve and Permit.

        Returns (the assumed PodInfo, node name), or None after handling the failure.
        """
        pi = q.pod_info
        try:
            host = self.schedule_pod(fw, state, pi)
        except FitError as fe:
            self.metrics.scheduling_algorithm_duration.observe(time.perf_counter() - start)
            if fw.post_filter_plugins:
                st = fw.run_post_filter(state, pi, fe.diagnosis.node_to_status)
                fe.diagnosis.post_filter_msg = st.message()
            self.handle_scheduling_failure(fw, q, Status(Code.UNSCHEDULABLE), start, fit_error=fe)
            return None
        except NoNodesAvailable as exc:
            self.handle_scheduling_failure(fw, q, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, str(exc)), start)
            return None
        except Exception as exc:
            log.error("error selecting node for pod", pod=pi.key, error=repr(exc))
            self.handle_scheduling_failure(fw, q, Status.as_error(exc), start)
            return None
        self.metrics.scheduling_algorithm_duration.observe(time.perf_counter() - start)
        assumed = pi.with_node(host)
        try:
            self.cache.assume_pod(assumed, host)
        except ValueError as exc:
            self.handle_scheduling_failure(fw, q, Status.as_error(exc), start)
            return None
        rst = fw.run_reserve(state, assumed, host)
        if rst is not None:
            fw.run_unreserve(state, assumed, host)
            self.cache.forget_pod(assumed.pod_key)
            self.handle_scheduling_failure(fw, q, rst, start, rejected_on=host)
            return None
        pst = fw.run_permit(state, assumed, host)
        if pst is not None and not pst.is_wait():
            fw.run_unreserve(state, assumed, host)
            self.cache.forget_pod(assumed.pod_key)
            self.handle_scheduling_failure(fw, q, pst, start, rejected_on=host)
            return None
        return assumed, host

    def schedule_pod(self, fw: Framework, state: CycleState, pi: PodInfo) -> str:
        """``schedulePod``: the chosen node's name.

        Raises:
            NoNodesAvailable: the cluster has no nodes.
            FitError: no node passed PreFilter and Filter.
            RuntimeError: a plugin returned Error.
        """
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
        nominated = pi.pod.status.nominated_node_name
        if nominated:
            # ``evaluateNominatedNode``: a node the pod was nominated to (a gang member that
            # waited at Permit there) is tried alone first.
            ni = self.cache.get_node_info(nominated)
            if ni is not None and (result is None or nominated in result):
                if fw.run_filter(state, pi, ni) is None:
                    return nominated
        nodes: Sequence[NodeInfo] = all_nodes
        if result is not None:
            nodes = [n for n in (self.cache.get_node_info(name) for name in result) if n is not None]
            nodes.sort(key=lambda n: n.name)
            diag.node_to_status.absent = Status.unresolvable(
                f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(with_nodes))}]"
            )
        entries: EntryTable | None = None
        if result is None and fw.filters_node_local(state):
            # Only un-narrowed cycles whose Filter plugins are all node-local may share answers
            # with earlier pods of the same shape (framework/equivalence.py).
            version = (self.cache.version, fw.cache_version(state, pi))
            entries = fw.equivalence.entries(pi.shape, version)
        feasible = self.find_nodes_that_pass_filters(fw, state, pi, diag, nodes, len(all_nodes), entries)
        if not feasible:
            raise FitError(pi, len(all_nodes), diag)
        if len(feasible) == 1 or not fw.has_score_plugins():
            return feasible[0].name
        pst = fw.run_pre_score(state, pi, feasible)
        if pst is not None:
            raise RuntimeError(pst.message())
        if entries is not None and fw.scores_node_local(state):
            totals = fw.run_score_cached(state, pi, feasible, entries)
        else:
            totals = fw.run_score(state, pi, feasible)
        return self.select_host(pi, feasible, totals)

    @staticmethod
    def select_host(pi: PodInfo, feasible: Sequence[NodeInfo], totals: Sequence[int]) -> str:
        """``selectHost``: a node with the highest total score, ties broken at random."""
        best = max(totals)
        best_i = random.choice(list(compress(range(len(totals)), map(best.__eq__, totals))))
        if enabled(10):
            for n, t in zip(feasible, totals, strict=True):
                log.info("Calculated node's final score for pod", v=10, pod=pi.key, node=n.name, score=t)
        return feasible[best_i].name

    def find_nodes_that_pass_filters(
        self,
        fw: Framework,
        state: CycleState,
        pi: PodInfo,
        diag: Diagnosis,
        nodes: Sequence[NodeInfo],
        num_all: int,
        entries: EntryTable | None = None,
    ) -> list[NodeInfo]:
        """``findNodesThatPassFilters``: up to ``numFeasibleNodesToFind`` feasible nodes.

        Rejections go into ``diag`` (each node's status; each distinct plugin/code once in
        the plugin sets). With ``entries`` a node's Filter answer is reused when its NodeInfo
        generation is unchanged.
        """
        start = time.perf_counter()
        n = len(nodes)
        if n == 0:
            return []
        to_find = num_feasible_nodes_to_find(fw.percentage_of_nodes_to_score, n)
        if not fw.has_score_plugins():
            to_find = 1
        feasible: list[NodeInfo] = []
        statuses = diag.node_to_status.statuses
        last_plugin: str | None = None
        last_code: Code | None = None
        idx0 = self.next_start_node_index % n
        processed = 0
        run_filter = fw.run_filter
        for ni in chain(nodes[idx0:], nodes[:idx0]) if idx0 else nodes:
            processed += 1
            if entries is None:
                s = run_filter(state, pi, ni)
            else:
                e = entries.get(ni.name)
                if e is not None and e.generation == ni.generation:
                    s = e.status
                else:
                    s = run_filter(state, pi, ni)
                    entries[ni.name] = EquivalenceEntry(ni.generation, s)
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

    async def binding_cycle(
        self, fw: Framework, state: CycleState, q: QueuedPodInfo, assumed: PodInfo, host: str, start: float
    ) -> None:
        """``bindingCycle``: wait at Permit, PreBind, Bind, the ``Scheduled`` event, PostBind."""
        try:
            wp = fw.waiting_pods.get(assumed.pod_key)
            if wp is not None:
                # NominatedNodeNameForExpectation: show where the waiting pod is about to go.
                await self.recorder.nominate(q.pod, host, abandon=wp.settled)
                st = await fw.wait_on_permit(assumed)
                if st is not None:
                    fit_error = None
                    if st.is_rejected():
                        diag = Diagnosis()
                        diag.node_to_status.set(host, st)
                        diag.unschedulable_plugins = {st.plugin} if st.plugin else set()
                        fit_error = FitError(assumed, 1, diag)
                        st = Status(st.code)
                    self.handle_binding_cycle_error(fw, state, q, assumed, host, start, st, fit_error)
                    return
            # Past Permit, no failure can make the pod "unschedulable" any more (PreBind and Bind
            # failures are errors), so the queue stops recording cluster events for it.
            self.queue.done(assumed.pod_key)
            st = await fw.run_pre_bind(state, assumed, host)
            if st is None:
                st = await fw.run_bind(state, assumed, host)
            if st is not None and not st.is_success():
                log.info("Failed to bind pod", v=1, pod=assumed.key, error=st.message())
                self.handle_binding_cycle_error(fw, state, q, assumed, host, start, st, None)
                return
            self.recorder.event(
                assumed.pod,
                controller=fw.profile_name,
                type_="Normal",
                reason="Scheduled",
                action="Binding",
                note=f"Successfully assigned {assumed.namespace}/{assumed.name} to {host}",
            )
            log.info("Successfully bound pod to node", v=2, pod=assumed.key, node=host)
            self._observe_scheduled(fw, q, time.perf_counter() - start)
            fw.run_post_bind(state, assumed, host)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("binding cycle failed", pod=assumed.key, error=repr(exc))
            self.handle_binding_cycle_error(fw, state, q, assumed, host, start, Status.as_error(exc), None)

    def _observe_scheduled(self, fw: Framework, q: QueuedPodInfo, elapsed: float) -> None:
        m = self.metrics
        m.schedule_attempts.labels("scheduled", fw.profile_name).inc()
        m.scheduling_attempt_duration.labels("scheduled", fw.profile_name).observe(elapsed)
        m.pod_scheduling_attempts.observe(q.attempts)
        if q.initial_attempt_timestamp is not None:
            label = "15+" if q.attempts >= 15 else str(q.attempts)
            m.pod_scheduling_sli_duration.labels(label).observe(time.time() - q.initial_attempt_timestamp)

    def handle_binding_cycle_error(
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
        """``handleBindingCycleError``: unreserve, forget the assumption, wake others, requeue."""
        key = assumed.pod_key
        fw.run_unreserve(state, assumed, host)
        if self.cache.forget_pod(key):
            # The capacity it held is free again: pods that failed for lack of it may fit now
            # (upstream sends an AssignedPodDelete-like move, skipping this very pod).
            self.queue.move_all_to_active_or_backoff(
                EVENT_ASSIGNED_POD_DELETE,
                assumed.pod,
                None,
                precheck=lambda other: other.pod_info.pod_key != key,
            )
        self.handle_scheduling_failure(fw, q, st, start, fit_error=fit_error)

    def handle_scheduling_failure(
        self,
        fw: Framework,
        q: QueuedPodInfo,
        st: Status,
        start: float,
        *,
        fit_error: FitError | None = None,
        rejected_on: str | None = None,
    ) -> None:
        """``handleSchedulingFailure``: metrics, requeue, FailedScheduling event, condition.

        ``rejected_on`` names the node of a pod rejected after a node was chosen (Reserve or
        Permit), so its message reads ``0/1 nodes are available: ...`` like upstream's.
        """
        pi = q.pod_info
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
        if live is None or live.uid != pi.uid or live.pod.spec.node_name:
            # Deleted, re-created under the same name, or bound meanwhile: nothing to requeue.
            self.queue.done(pi.pod_key)
        else:
            q.pod_info = live
            self.queue.add_unschedulable_if_not_present(q)
        pod = live.pod if live is not None else pi.pod
        self.recorder.event(
            pod, controller=fw.profile_name, type_="Warning", reason="FailedScheduling", action="Scheduling", note=msg
        )
        self.recorder.pod_scheduled_false(pod, reason, msg)

    async def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for in-flight binding cycles."""
        if self.binding_tasks:
            await asyncio.wait(list(self.binding_tasks), timeout=timeout)
