"""The scheduling cycle and the binding cycle of one pod.

Mirrors ``pkg/scheduler/schedule_one.go`` (v1.35.4):

* :meth:`ScheduleOne.scheduling_cycle` picks a node (``generic_scheduler.py``: PreFilter,
  Filter, Score), runs PostFilter on failure, then assumes the pod and runs Reserve and
  Permit. All of it is synchronous on the event loop, so the cache itself is the cycle's
  snapshot: no informer event can land between PreFilter and Permit.
* :meth:`ScheduleOne.binding_cycle` (a task per pod) waits at Permit, runs PreBind and Bind,
  records the ``Scheduled`` event ``Successfully assigned {ns}/{pod} to {node}`` and runs
  PostBind.
* :meth:`ScheduleOne.handle_scheduling_failure` records ``FailedScheduling`` with the
  FitError text, sets ``PodScheduled=False`` (reason ``Unschedulable`` or ``SchedulerError``),
  keeps that text as a gang member's last reason for its PodGroup, and requeues the pod (a pod
  found bound meanwhile gets none of it); :meth:`ScheduleOne.handle_binding_cycle_error` first
  un-reserves the pod and forgets its assumption, and tells a gang member's PodGroup why its
  Binding failed.
* :meth:`ScheduleOne.handle_cycle_exception`: a scheduling cycle that raised (a bug, or an
  input no plugin guarded against) costs this pod's attempt only: whatever it reserved is
  released, and it fails like an Error status (``Error scheduling pod; retrying``, a
  ``FailedScheduling`` event, a retry after backoff).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from ome_scheduler.api.core import Pod
from ome_scheduler.backend.cache import SchedulerCache
from ome_scheduler.backend.podgroups import PodGroupState
from ome_scheduler.backend.queue import SchedulingQueue
from ome_scheduler.framework.events import EVENT_ASSIGNED_POD_DELETE
from ome_scheduler.framework.interface import POST_FILTER_NOMINATION_KEY, CycleState, EventRecorder
from ome_scheduler.framework.runtime import Diagnosis, FitError, Framework
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import PodInfo, QueuedPodInfo
from ome_scheduler.generic_scheduler import GenericScheduler, NoNodesAvailable
from ome_scheduler.logs import get_logger
from ome_scheduler.metrics import Metrics

log = get_logger()

NOMINATE_AFTER_S = 1.0
"""Seconds a pod waits at Permit before its ``nominatedNodeName`` is patched.

Upstream (NominatedNodeNameForExpectation, ``pkg/scheduler/schedule_one.go`` bindingCycle)
patches before waiting, to tell the cluster autoscaler and other schedulers where a waiting pod
is about to go, and skips the patch when the pod "will be soon bound anyway". Most gangs finish
forming within milliseconds of their last member's cycle, so that patch would be one extra
write per member, as costly to the API server as the Binding that follows; waiting this long
first keeps it for the waits that last.
"""
PLUGIN_METRICS_SAMPLE_PERCENT = 10
"""Share of cycles whose per-plugin durations are observed (kube-scheduler's pluginMetricsSamplePercent)."""


@dataclass(kw_only=True)
class ScheduleOne:
    """Runs each popped pod through its profile's framework and binds it in the background.

    ``frameworks`` by scheduler name; ``pods`` the informer's latest PodInfo by
    ``namespace/name`` (a failed pod is requeued with its latest version).
    """

    cache: SchedulerCache
    queue: SchedulingQueue
    frameworks: Mapping[str, Framework]
    pods: Mapping[str, PodInfo]
    recorder: EventRecorder
    metrics: Metrics
    pod_groups: PodGroupState | None = None
    """Where a gang member's failure reason is kept for its PodGroup's ``ome.io/waiting-reason``."""
    binding_tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    cycle: int = field(default=0, init=False)
    """Pods popped so far (``SchedulingQueue.SchedulingCycle``), skipped ones included: the
    number of the current scheduling cycle, which OpportunisticBatching compares."""

    def __post_init__(self) -> None:
        self.algorithm = GenericScheduler(self.cache, self.metrics)

    def schedule_one(self, q: QueuedPodInfo) -> None:
        """``ScheduleOne``: one scheduling cycle; on success a binding-cycle task is started."""
        self.cycle += 1
        pi = q.pod_info
        fw = self.frameworks.get(pi.pod.spec.scheduler_name)
        if fw is None:
            self.queue.done(pi.pod_key)
            return
        live = self.pods.get(pi.key)
        if live is not None and live.uid == pi.uid:
            pi = q.pod_info = live  # the informer's latest version of this pod
        if pi.pod.metadata.deletion_timestamp is not None:
            self._failed_scheduling(fw, pi.pod, f"skip schedule deleting pod: {pi.namespace}/{pi.name}")
            self.queue.done(pi.pod_key)
            return
        if self.cache.is_assumed(pi.pod_key) or pi.pod.spec.node_name:
            self.queue.done(pi.pod_key)  # already on its way to a node (``skipPodSchedule``)
            return
        start = time.perf_counter()
        state = CycleState()
        state.record_plugin_metrics = random.randrange(100) < PLUGIN_METRICS_SAMPLE_PERCENT
        try:
            placed = self.scheduling_cycle(fw, state, q, start)
        except Exception as exc:
            self.handle_cycle_exception(fw, state, q, start, exc)
            return
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
            host = self.algorithm.schedule_pod(fw, state, pi, self.cycle)
        except FitError as fe:
            self.metrics.scheduling_algorithm_duration.observe(time.perf_counter() - start)
            nominated: str | None = None
            if fw.post_filter_plugins:
                st = fw.run_post_filter(state, pi, fe.diagnosis.node_to_status)
                fe.diagnosis.post_filter_msg = st.message()
                nominated = state.get(POST_FILTER_NOMINATION_KEY)
            self.handle_scheduling_failure(fw, q, Status(Code.UNSCHEDULABLE), start, fit_error=fe, nominated=nominated)
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

    async def binding_cycle(
        self, fw: Framework, state: CycleState, q: QueuedPodInfo, assumed: PodInfo, host: str, start: float
    ) -> None:
        """``bindingCycle``: PreBindPreFlight, wait at Permit, PreBind, Bind, the ``Scheduled``
        event, PostBind.

        NominatedNodeNameForExpectation: when a PreBind plugin has work for the pod
        (``run_pre_bind_pre_flights`` Success: VolumeBinding with claims to bind, DynamicResources
        with claims), ``status.nominatedNodeName`` is patched to ``host`` first, as upstream; a
        pod waiting at Permit without such work is nominated once it has waited
        ``NOMINATE_AFTER_S``. A PreBindPreFlight Error fails the binding cycle.
        """
        try:
            wp = fw.waiting_pods.get(assumed.pod_key)
            pre = fw.run_pre_bind_pre_flights(state, assumed, host)
            if pre is not None and not pre.is_skip():
                if wp is not None:
                    # The binding cycle ends before its wait: the pod must not stay parked.
                    wp.reject(pre.plugin, pre.message())
                    fw.waiting_pods.remove(assumed.pod_key)
                self.handle_binding_cycle_error(fw, state, q, assumed, host, start, pre, None)
                return
            if pre is None:
                try:
                    await self.recorder.nominate(q.pod, host)
                except Exception as exc:
                    # Upstream carries on: "not critical enough to stop binding cycles here".
                    log.error(
                        "Failed to update the nominated node name in the binding cycle",
                        pod=assumed.key,
                        nominatedNodeName=host,
                        err=repr(exc),
                    )
            elif wp is not None:
                # Show where the waiting pod is about to go, once it has waited long enough for
                # that to be news (NOMINATE_AFTER_S).
                await asyncio.wait((wp.settled,), timeout=NOMINATE_AFTER_S)
                if not wp.settled.done():
                    await self.recorder.nominate(q.pod, host, abandon=wp.settled)
            if wp is not None:
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
            log.info("Attempting to bind pod to node", v=3, pod=assumed.key, node=host)
            st = await fw.run_pre_bind(state, assumed, host)
            if st is None:
                st = await fw.run_bind(state, assumed, host)
            if st is not None and not st.is_success():
                log.info("Failed to bind pod", v=1, pod=assumed.key, error=st.message())
                self.handle_binding_cycle_error(fw, state, q, assumed, host, start, st, None, bind_failed=True)
                return
            self.cache.finish_binding(assumed.pod_key, time.monotonic())
            note = f"Successfully assigned {assumed.namespace}/{assumed.name} to {host}"
            self.recorder.event(
                assumed.pod, controller=fw.profile_name, type_="Normal", reason="Scheduled", action="Binding", note=note
            )
            log.info("Successfully bound pod to node", v=2, pod=assumed.key, node=host)
            self._observe_scheduled(fw, q, time.perf_counter() - start)
            fw.run_post_bind(state, assumed, host)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("binding cycle failed", pod=assumed.key, error=repr(exc))
            st = Status.as_error(exc)
            self.handle_binding_cycle_error(fw, state, q, assumed, host, start, st, None, bind_failed=True)

    def handle_cycle_exception(
        self, fw: Framework, state: CycleState, q: QueuedPodInfo, start: float, exc: Exception
    ) -> None:
        """The scheduling cycle raised: release what it reserved, then fail the pod with an Error
        status (``FailedScheduling``, ``PodScheduled=False`` reason ``SchedulerError``, requeued
        with backoff), as upstream does for an error returned by the cycle."""
        pi = q.pod_info
        log.error("Error scheduling pod; retrying", pod=pi.key, err=repr(exc), exc_info=exc)
        node = self.cache.assumed_node(pi.pod_key)
        if node is not None and fw.waiting_pods.get(pi.pod_key) is None:
            assumed = pi.with_node(node)
            fw.run_unreserve(state, assumed, node)
            self.cache.forget_pod(pi.pod_key)
        self.handle_scheduling_failure(fw, q, Status.as_error(exc), start)

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
        *,
        bind_failed: bool = False,
    ) -> None:
        """``handleBindingCycleError``: unreserve, forget the assumption, wake others, requeue.

        ``bind_failed``: PreBind or Bind failed (the API server refused or could not be
        reached), rather than the wait at Permit. A gang member's PodGroup then gets a Warning
        ``FailedBinding`` event with the error, since the gang cannot complete while that member
        cannot be bound (its holds still end ``scheduleTimeoutSeconds`` after it began forming).
        """
        key = assumed.pod_key
        fw.run_unreserve(state, assumed, host)
        if self.cache.forget_pod(key):
            # The capacity it held is free again: pods that failed for lack of it may fit now
            # (upstream sends an AssignedPodDelete-like move, skipping this very pod).
            self.queue.move_all_to_active_or_backoff(
                EVENT_ASSIGNED_POD_DELETE, assumed.pod, None, precheck=lambda other: other.pod_info.pod_key != key
            )
        if bind_failed and assumed.gang and self.pod_groups is not None:
            live = self.pods.get(assumed.key)
            pg = self.pod_groups.get(assumed.namespace, assumed.gang)
            if pg is not None and live is not None and live.uid == assumed.uid and not live.pod.spec.node_name:
                note = f"member {assumed.key} could not be bound to node {host}: {st.message()}"
                self.recorder.event(
                    pg, controller=fw.profile_name, type_="Warning", reason="FailedBinding", action="Binding", note=note
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
        nominated: str | None = None,
    ) -> None:
        """``handleSchedulingFailure``: metrics, requeue, FailedScheduling event, condition.

        ``rejected_on`` names the node of a pod rejected after a node was chosen (Reserve or
        Permit), so its message reads ``0/1 nodes are available: ...`` like upstream's.
        ``nominated`` is PostFilter's nominating info (a preemptor's node: ``AddNominatedPod``
        and ``nominatedNodeName`` patched with the condition; ``""``: the nomination cleared;
        None: as before, the condition's patch clears it).
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
            **({"gang": pi.gang_key} if pi.gang else {}),
            err=msg,
        )
        live = self.pods.get(pi.key)
        if live is not None and live.uid == pi.uid and live.pod.spec.node_name:
            # Bound meanwhile (a Binding whose answer was lost may still have landed, or another
            # scheduler bound it): nothing to requeue, and no FailedScheduling nor
            # PodScheduled=False on a bound pod (upstream would still write both).
            log.info("Pod has been assigned to node; not requeued", v=2, pod=pi.key, node=live.pod.spec.node_name)
            self.queue.done(pi.pod_key)
            return
        if live is None or live.uid != pi.uid:
            # Deleted, or re-created under the same name: nothing to requeue.
            self.queue.done(pi.pod_key)
        else:
            q.pod_info = live
            self.queue.add_unschedulable_if_not_present(q)
        pod = live.pod if live is not None else pi.pod
        self._failed_scheduling(fw, pod, msg)
        if nominated and live is not None and live.uid == pi.uid:
            fw.handle.nominate(live, nominated)
            self.recorder.pod_scheduled_false(pod, reason, msg, clear_nominated=False)
            self._start(self.recorder.nominate(pod, nominated))
        else:
            if nominated == "" and live is not None:
                fw.handle.nominate(live, "")
            self.recorder.pod_scheduled_false(pod, reason, msg)
        if pi.gang and self.pod_groups is not None:
            self.pod_groups.set_reason(pi.gang_key, msg)
            absent = fit_error.diagnosis.node_to_status.absent if fit_error is not None else None
            if absent is not None and fit_error is not None and fit_error.diagnosis.pre_filter_msg and absent.plugin:
                if absent.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    # A member no node can take as the cluster stands: the gang plugin is told.
                    self.pod_groups.member_unresolvable(pi, absent.plugin, absent.message())

    def _start(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in the background, kept until done (like the binding cycles)."""
        task = asyncio.get_running_loop().create_task(coro)
        self.binding_tasks.add(task)
        task.add_done_callback(self.binding_tasks.discard)

    def _failed_scheduling(self, fw: Framework, pod: Pod, note: str) -> None:
        """The ``FailedScheduling`` Warning event (action ``Scheduling``) on ``pod``."""
        self.recorder.event(
            pod, controller=fw.profile_name, type_="Warning", reason="FailedScheduling", action="Scheduling", note=note
        )

    async def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for in-flight binding cycles."""
        if self.binding_tasks:
            with anyio.move_on_after(timeout):
                await asyncio.wait(list(self.binding_tasks))  # waiting cancels no binding
