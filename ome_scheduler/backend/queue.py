"""The scheduling queue: activeQ, backoffQ and the unschedulable pods, moved by queueing hints.

Mirrors ``pkg/scheduler/backend/queue/{scheduling_queue,active_queue,backoff_queue}.go``
(v1.35.4, queueing hints on, SchedulerPopFromBackoffQ on):

* activeQ pops by the profile's QueueSort (PrioritySort: priority, then enqueue time).
* A pod rejected by plugins goes to the unschedulable pods unless an event seen while it was
  in flight makes a rejector plugin's hint answer Queue; then to backoffQ (or activeQ when
  its backoff already expired). Backoff is ``initial * 2^(failures-1)`` capped at ``max``,
  aligned to a 1 s window. Pods that failed with an error back off in a separate queue.
* When activeQ is empty, ``pop`` takes the earliest pod of backoffQ (not of the error queue).
* Cluster events move unschedulable pods whose rejector plugins registered a matching event
  and whose hint answers Queue; pods stuck longer than 5 minutes are flushed anyway.
* PreEnqueue (SchedulingGates) keeps gated pods among the unschedulable pods, un-attempted.

In-flight events (upstream's ``inFlightPods`` and ``inFlightEvents`` in ``active_queue.go``): a
pod is *in flight* from ``pop`` until ``done`` (its scheduling cycle, its wait at Permit and
the start of its binding cycle). A cluster event seen meanwhile cannot move the pod (it is in
no queue), and the cycle may already have read the state the event changed. So every event
seen while any pod is in flight is kept, numbered on one clock with the pops; when a pod
fails, the events numbered after its pop are replayed against its rejector plugins' hints
(``determineSchedulingHintForInFlightPod``): an event that may have made it schedulable sends
it to backoffQ or activeQ instead of the unschedulable pods, so no event is lost. ``done``
then drops the events older than every pod still in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from ome_scheduler.api.core import Pod
from ome_scheduler.backend.backoff_queue import BACKOFF_WINDOW, BackoffQueue, PodHeap, uid_of
from ome_scheduler.backend.gangpacing import GangPacing
from ome_scheduler.framework.events import (
    EVENT_ASSIGNED_POD_ADD,
    EVENT_FORCE_ACTIVATE,
    EVENT_UNSCHEDULABLE_TIMEOUT,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    QueueingHint,
    pod_scheduling_properties_change,
)
from ome_scheduler.framework.types import GangKey, PodInfo, PodKey, QueuedPodInfo, pod_key
from ome_scheduler.logs import get_logger
from ome_scheduler.metrics import Metrics

log = get_logger()


class QueueingStrategy(IntEnum):
    """``queueingStrategy``: where a cluster event (or a failure) sends an unschedulable pod."""

    SKIP = 0
    """``queueSkip``: stay among the unschedulable pods."""
    AFTER_BACKOFF = 1
    """``queueAfterBackoff``: to backoffQ, or to activeQ when its backoff already expired."""
    IMMEDIATELY = 2
    """``queueImmediately``: to activeQ, backoff skipped (a Pending plugin's hint said Queue)."""


ACTIVE, BACKOFF, UNSCHEDULABLE = "active", "backoff", "unschedulable"

HintMap = dict[ClusterEvent, list[tuple[str, ClusterEventWithHint[Any]]]]


@dataclass(frozen=True, slots=True)
class InFlightEvent:
    """``clusterEvent``: one cluster event seen while a pod was in flight, numbered after the
    pops that came before it."""

    seq: int
    event: ClusterEvent
    old: Any
    new: Any


@dataclass
class ProfileQueueing:
    """What the queue needs from one profile (framework)."""

    hints: HintMap
    sort_key: Callable[[QueuedPodInfo], tuple[Any, ...]]
    pre_enqueue: Callable[[PodInfo], Any]


class SchedulingQueue:
    """The PriorityQueue. All methods run on the event loop; ``pop`` awaits a pod."""

    def __init__(
        self,
        profiles: dict[str, ProfileQueueing],
        *,
        metrics: Metrics,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_in_unschedulable: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.profiles = profiles
        """By scheduler name: the profile's hints, QueueSort key and PreEnqueue (read only)."""
        self.metrics = metrics  # pending pods, incoming pods and unschedulable-plugin counts
        self.initial_backoff = initial_backoff  # seconds; doubled per failure up to max_backoff
        self.max_backoff = max_backoff  # 0: no backoff at all
        self.max_in_unschedulable = max_in_unschedulable  # seconds before the leftover flush retries a pod
        self.clock = clock  # monotonic seconds: timestamps, backoff expiry, the leftover flush
        first = next(iter(profiles.values()))
        self.pacing = GangPacing(initial_backoff, max_backoff, BACKOFF_WINDOW)
        """Gang members: one representative per event, one backoff per gang (``gangpacing.py``)."""
        self.active = PodHeap(first.sort_key, self.pacing.queued_changed)
        """activeQ, in QueueSort order: filled by every move to active, drained by ``pop``."""
        self.backoffq = BackoffQueue(
            first.sort_key, self.pacing, initial_backoff=initial_backoff, max_backoff=max_backoff, clock=clock
        )
        """backoffQ (``backoff_queue.go``): ``pop`` takes the head of its standalone pods when
        activeQ is empty, ``flush_backoff_completed`` moves the pods whose backoff ended to
        activeQ; gang members and pods that failed with an error wait until then."""
        self.backoff, self.gang_backoff, self.error_backoff = (
            self.backoffq.plain,
            self.backoffq.gang,
            self.backoffq.errors,
        )
        """Its three heaps, by name (read by the simulation, the status keeper and tests)."""
        self.unschedulable: dict[PodKey, QueuedPodInfo] = {}
        """unschedulablePods (gated pods too): left on a cluster event whose hint says Queue,
        on ``activate``, or after ``max_in_unschedulable`` seconds."""
        self.in_flight: dict[PodKey, int] = {}
        """Pods popped and not yet ``done`` -> the number ``pop`` gave them (module docstring)."""
        self._in_flight_gang: dict[PodKey, GangKey] = {}
        """Gang members in flight -> their gang key (``done`` tells the pacing the gang progressed)."""
        self._events: list[InFlightEvent] = []
        """Events seen while any pod was in flight, oldest first: appended by
        ``_record_in_flight_event`` and ``activate``, replayed by ``_hint_for_in_flight``,
        trimmed by ``done``."""
        self._event_seq = itertools.count(1)
        """The one clock that numbers pops and in-flight events."""
        self._wakeup = asyncio.Event()  # set when a pod joins activeQ or backoffQ, or on close; pop waits
        self.closed = False  # set by close: pop returns None, the flush loop ends
        self._all_events = [ev for p in profiles.values() for ev in p.hints]  # every registered event
        self._gauge_dirty = True  # set on every change; run refreshes scheduler_pending_pods each second
        self._pending_children = {q: metrics.pending_pods.labels(q) for q in (ACTIVE, BACKOFF, UNSCHEDULABLE, "gated")}
        """``scheduler_pending_pods`` by queue, set by ``refresh_gauges``."""

    # ---- bookkeeping ------------------------------------------------------------------

    def _incoming(self, queue: str, event: str) -> None:
        self.metrics.queue_incoming_pods.labels(queue, event).inc()

    def _gauge(self) -> None:
        """Mark ``scheduler_pending_pods`` stale; ``run`` refreshes it every second."""
        self._gauge_dirty = True

    def refresh_gauges(self) -> None:
        """Set ``scheduler_pending_pods`` (O(unschedulable pods), hence off the hot path)."""
        self._gauge_dirty = False
        gated = sum(1 for q in self.unschedulable.values() if q.gated)
        m = self._pending_children
        m[ACTIVE].set(len(self.active))
        m[BACKOFF].set(len(self.backoffq))
        m[UNSCHEDULABLE].set(len(self.unschedulable) - gated)
        m["gated"].set(gated)

    def _signal(self) -> None:
        self._wakeup.set()

    def _profile(self, q: QueuedPodInfo) -> ProfileQueueing | None:
        return self.profiles.get(q.pod.spec.scheduler_name)

    def _is_backing_off(self, q: QueuedPodInfo) -> bool:
        return self.backoffq.is_backing_off(q)

    def _run_pre_enqueue(self, q: QueuedPodInfo) -> None:
        """``runPreEnqueuePlugins``: a rejecting plugin gates the pod and joins its rejectors."""
        p = self._profile(q)
        q.gating_plugin = ""
        if p is None:
            return
        s = p.pre_enqueue(q.pod_info)
        if s is not None:
            q.gating_plugin = s.plugin or "PreEnqueue"
            # upstream: logger.V(4).Info("Status after running PreEnqueue plugin", ...)
            log.info(
                "Status after running PreEnqueue plugin",
                v=4,
                pod=q.pod_info.key,
                plugin=q.gating_plugin,
                status=s.message(),
            )
            if q.gating_plugin not in q.unschedulable_plugins:
                q.unschedulable_plugins.add(q.gating_plugin)
                self.metrics.unschedulable_pods.labels(q.gating_plugin, q.pod.spec.scheduler_name).inc()

    def _gating_events_match(self, q: QueuedPodInfo, event: ClusterEvent) -> bool:
        """``MatchAnyClusterEvent(event, GatingPluginEvents)``: may this event ungate the pod?"""
        p = self._profile(q)
        if p is None:
            return False
        return any(
            registered.matches(event) and any(plugin == q.gating_plugin for plugin, _ in hints)
            for registered, hints in p.hints.items()
        )

    def _remove_everywhere(self, uid: PodKey) -> None:
        self.unschedulable.pop(uid, None)
        self.backoffq.remove(uid)

    def _move_to_active(self, q: QueuedPodInfo, event: str, from_backoff: bool = False) -> bool:
        if not from_backoff:
            self._run_pre_enqueue(q)
        uid = uid_of(q)
        if q.gated:
            if self.contains(uid):
                return False
            self.unschedulable[uid] = q
            self._incoming(UNSCHEDULABLE, event)
            return False
        if q.initial_attempt_timestamp is None:
            q.initial_attempt_timestamp = time.time()
        self._remove_everywhere(uid)
        self.active.push(q)
        self._incoming(ACTIVE, event)
        self._signal()
        return True

    def _move_to_backoff(self, q: QueuedPodInfo, event: str) -> bool:
        self._run_pre_enqueue(q)
        uid = uid_of(q)
        if q.gated:
            if uid not in self.unschedulable:
                self.unschedulable[uid] = q
                self._incoming(UNSCHEDULABLE, event)
            return False
        self.unschedulable.pop(uid, None)
        self.active.remove(uid)
        self.backoffq.add(q)
        self._incoming(BACKOFF, event)
        self._signal()
        return True

    def _requeue(self, q: QueuedPodInfo, strategy: QueueingStrategy, event: str) -> str:
        if strategy == QueueingStrategy.SKIP:
            self.unschedulable[uid_of(q)] = q
            self._incoming(UNSCHEDULABLE, event)
            return UNSCHEDULABLE
        if strategy == QueueingStrategy.AFTER_BACKOFF and self._is_backing_off(q):
            return BACKOFF if self._move_to_backoff(q, event) else UNSCHEDULABLE
        return ACTIVE if self._move_to_active(q, event) else UNSCHEDULABLE

    def _worth_requeuing(self, q: QueuedPodInfo, event: ClusterEvent, old: Any, new: Any) -> QueueingStrategy:
        """``isPodWorthRequeuing``."""
        rejectors = q.unschedulable_plugins | q.pending_plugins
        if not rejectors:
            return QueueingStrategy.AFTER_BACKOFF
        if event.is_wildcard():
            if isinstance(new, Pod) and pod_key(new.metadata) != q.pod_info.pod_key:
                return QueueingStrategy.SKIP
            return QueueingStrategy.AFTER_BACKOFF
        p = self._profile(q)
        if p is None:
            return QueueingStrategy.AFTER_BACKOFF
        strategy = QueueingStrategy.SKIP
        for registered, hints in p.hints.items():
            if not registered.matches(event):
                continue
            for plugin, ev in hints:
                if plugin not in rejectors:
                    continue
                if ev.hint is None:
                    hint = QueueingHint.QUEUE
                else:
                    try:
                        hint = ev.hint(q.pod, old, new)
                    except Exception as exc:
                        log.error(
                            "QueueingHintFn returns error", plugin=plugin, cluster_event=event.label(), error=str(exc)
                        )
                        hint = QueueingHint.QUEUE
                if hint == QueueingHint.QUEUE_SKIP:
                    continue
                if plugin in q.pending_plugins:
                    return QueueingStrategy.IMMEDIATELY
                if not q.pending_plugins:
                    return QueueingStrategy.AFTER_BACKOFF
                strategy = QueueingStrategy.AFTER_BACKOFF
        return strategy

    def _interesting(self, event: ClusterEvent) -> bool:
        return event.is_wildcard() or any(r.matches(event) for r in self._all_events)

    def _record_in_flight_event(self, event: ClusterEvent, old: Any, new: Any) -> None:
        if self.in_flight:
            self._events.append(InFlightEvent(next(self._event_seq), event, old, new))

    # ---- public API -------------------------------------------------------------------

    def add(self, pi: PodInfo) -> None:
        """A new unscheduled pod (``Add``)."""
        self._move_to_active(QueuedPodInfo(pi, timestamp=self.clock()), "PodAdd")
        self._gauge()

    def update(self, old: Pod | None, pi: PodInfo) -> None:
        """An unscheduled pod changed (``Update``)."""
        uid = pi.pod_key
        events = pod_scheduling_properties_change(pi.pod, old) if old is not None else []
        if uid in self.in_flight:
            for ev in events:
                self._record_in_flight_event(ev, old, pi.pod)
            return
        for heap in (self.active, self.backoff, self.gang_backoff, self.error_backoff):
            q = heap.get(uid)
            if q is not None:
                heap.remove(uid)
                q.pod_info = pi
                heap.push(q)
                return
        q = self.unschedulable.get(uid)
        if q is not None:
            q.pod_info = pi
            for ev in events:
                hint = self._worth_requeuing(q, ev, old, pi.pod)
                if hint == QueueingStrategy.SKIP:
                    continue
                del self.unschedulable[uid]
                where = self._requeue(q, hint, ev.label())
                if where != UNSCHEDULABLE:
                    break
            self._gauge()
            return
        self._move_to_active(QueuedPodInfo(pi, timestamp=self.clock()), "UnschedulablePodUpdate")
        self._gauge()

    def delete(self, uid: PodKey) -> None:
        """The pod was deleted or bound: drop it from every queue (``Delete``)."""
        self.active.remove(uid)
        self._remove_everywhere(uid)
        self._gauge()

    def contains(self, uid: PodKey) -> bool:
        """Whether the pod waits in activeQ, backoffQ or among the unschedulable pods."""
        return uid in self.active or uid in self.backoffq or uid in self.unschedulable

    async def pop(self) -> QueuedPodInfo | None:
        """``Pop``: the head of activeQ, else of the standalone pods' backoffQ; waits while both are
        empty. Gang members leave backoffQ only when their backoff ends (``gangpacing.py``)."""
        while True:
            if self.closed:
                return None
            q = self.active.pop()
            if q is None:
                q = self.backoffq.pop_early()
                if q is not None:
                    self._incoming(ACTIVE, "PopFromBackoffQ")
            if q is not None:
                q.attempts += 1
                q.backoff_expiration = 0.0
                self.in_flight[uid_of(q)] = next(self._event_seq)
                if q.pod_info.gang:
                    self._in_flight_gang[uid_of(q)] = q.pod_info.gang_key
                profile = q.pod.spec.scheduler_name
                for plugin in q.unschedulable_plugins | q.pending_plugins:
                    self.metrics.unschedulable_pods.labels(plugin, profile).dec()
                q.unschedulable_plugins = set()
                q.pending_plugins = set()
                q.gating_plugin = ""
                self._gauge()
                return q
            self._wakeup.clear()
            await self._wakeup.wait()

    def done(self, uid: PodKey) -> None:
        """The pod left its scheduling and binding cycles (``Done``) without failing them (bound,
        or gone): its gang progressed. Drop events nobody needs."""
        gang = self._in_flight_gang.get(uid)
        if gang is not None:
            self.pacing.progressed(gang)
        self._done(uid)

    def _done(self, uid: PodKey) -> None:
        self._in_flight_gang.pop(uid, None)
        self.in_flight.pop(uid, None)
        if not self.in_flight:
            self._events.clear()
        else:
            oldest = min(self.in_flight.values())
            self._events = [e for e in self._events if e.seq > oldest]

    def add_unschedulable_if_not_present(self, q: QueuedPodInfo) -> None:
        """``AddUnschedulableIfNotPresent``: requeue a pod that failed its cycle."""
        uid = uid_of(q)
        try:
            if self.contains(uid):
                return
            if not q.unschedulable_plugins and not q.pending_plugins:
                q.consecutive_errors_count += 1
            else:
                q.unschedulable_count += 1
                q.consecutive_errors_count = 0
                self.pacing.failed(q, self.clock())
            q.timestamp = self.clock()
            q.backoff_expiration = 0.0
            profile = q.pod.spec.scheduler_name
            for plugin in q.unschedulable_plugins | q.pending_plugins:
                self.metrics.unschedulable_pods.labels(plugin, profile).inc()
            strategy = self._hint_for_in_flight(q)
            if self.pacing.take_retry(uid) and strategy == QueueingStrategy.SKIP:
                strategy = QueueingStrategy.AFTER_BACKOFF  # OMEGangPack asked: its next domain waits
            self._requeue(q, strategy, "ScheduleAttemptFailure")
        finally:
            self._done(uid)
            self._gauge()

    def _hint_for_in_flight(self, q: QueuedPodInfo) -> QueueingStrategy:
        """``determineSchedulingHintForInFlightPod``: the events since ``q``'s pop, against its hints."""
        if not q.unschedulable_plugins and not q.pending_plugins:
            return QueueingStrategy.AFTER_BACKOFF
        start = self.in_flight.get(uid_of(q), 0)
        strategy = QueueingStrategy.SKIP
        for e in self._events:
            if e.seq <= start:
                continue
            s = self._worth_requeuing(q, e.event, e.old, e.new)
            if s == QueueingStrategy.IMMEDIATELY:
                return s
            if s == QueueingStrategy.AFTER_BACKOFF:
                strategy = s
                if not q.pending_plugins:
                    return s
        return strategy

    def retry_after_backoff(self, uid: PodKey) -> None:
        """When the in-flight pod's attempt fails, send it to backoffQ even if no event came
        (OMEGangPack: another fitting domain is untried, ``gangpacing.py``)."""
        if uid in self.in_flight:
            self.pacing.retry_after_backoff(uid)

    def activate(self, pods: Iterable[Pod]) -> None:
        """``Activate``: move pods from unschedulable or backoff straight to activeQ."""
        for pod in pods:
            uid = pod_key(pod.metadata)
            q = self.unschedulable.get(uid)
            from_backoff = False
            if q is None:
                q = self.backoffq.get(uid)
                if q is None:
                    if uid in self.in_flight:
                        self._events.append(InFlightEvent(next(self._event_seq), EVENT_FORCE_ACTIVATE, None, pod))
                    continue
                from_backoff = True
            self._move_to_active(q, "ForceActivate", from_backoff)
        self._gauge()

    def move_all_to_active_or_backoff(
        self, event: ClusterEvent, old: Any, new: Any, precheck: Callable[[QueuedPodInfo], bool] | None = None
    ) -> None:
        """``MoveAllToActiveOrBackoffQueue`` over the unschedulable pods."""
        if not self._interesting(event):
            return
        pods = [q for q in self.unschedulable.values() if precheck is None or precheck(q)]
        self._move_pods(pods, event, old, new)

    def _move_pods(self, pods: list[QueuedPodInfo], event: ClusterEvent, old: Any, new: Any) -> None:
        if not self._interesting(event):
            return
        for q in pods:
            if q.gated and not self._gating_events_match(q, event):
                continue
            if self.pacing.busy(q):
                continue  # a sibling already stands for the gang (gangpacing.py)
            s = self._worth_requeuing(q, event, old, new)
            if s == QueueingStrategy.SKIP:
                continue
            self.unschedulable.pop(uid_of(q), None)
            self._requeue(q, s, event.label())
        self._record_in_flight_event(event, old, new)
        self._gauge()

    def assigned_pod_added(self, pod: Pod, ns_labels: dict[str, str]) -> None:
        """``AssignedPodAdded``: wake pods whose affinity terms match, or rejected by spread."""
        self._move_pods(self._cross_topology(pod, ns_labels), EVENT_ASSIGNED_POD_ADD, None, pod)

    def assigned_pod_updated(self, old: Pod, new: Pod, event: ClusterEvent, ns_labels: dict[str, str]) -> None:
        """``AssignedPodUpdated``: a scale-down may free room for anyone; other updates wake only
        pods whose affinity or spread terms the pod now meets."""
        if event.action & ActionType.UPDATE_POD_SCALE_DOWN:
            self.move_all_to_active_or_backoff(event, old, new)
        else:
            self._move_pods(self._cross_topology(new, ns_labels), event, old, new)

    def _cross_topology(self, pod: Pod, ns_labels: dict[str, str]) -> list[QueuedPodInfo]:
        out = []
        for q in self.unschedulable.values():
            if "PodTopologySpread" in q.unschedulable_plugins and pod.metadata.namespace == q.pod.metadata.namespace:
                out.append(q)
                continue
            if any(t.matches(pod, ns_labels) for t in q.pod_info.required_affinity_terms):
                out.append(q)
        return out

    def flush_backoff_completed(self) -> None:
        """``flushBackoffQCompleted``: pods whose backoff expired move to activeQ."""
        for q in list(self.backoffq.pop_completed()):
            self._move_to_active(q, "BackoffComplete", from_backoff=True)
        self._gauge()

    def flush_unschedulable_leftover(self) -> None:
        """Pods unschedulable for longer than ``max_in_unschedulable`` seconds are retried."""
        now = self.clock()
        stale = [q for q in self.unschedulable.values() if now - q.timestamp > self.max_in_unschedulable]
        if stale:
            self._move_pods(stale, EVENT_UNSCHEDULABLE_TIMEOUT, None, None)

    async def run(self) -> None:
        """Periodic flushes: backoffQ every second, leftovers every 30 seconds."""
        n = 0
        while not self.closed:
            await asyncio.sleep(BACKOFF_WINDOW)
            n += 1
            try:
                self.flush_backoff_completed()
                if self._gauge_dirty:
                    self.refresh_gauges()
                if n % 30 == 0:
                    self.flush_unschedulable_leftover()
            except Exception as exc:  # one bad pod must not stop every retry
                log.error("Unhandled Error", component="queue flush", err=repr(exc), exc_info=exc)

    def close(self) -> None:
        """Stop: ``pop`` returns None from now on and the flush loop ends."""
        self.closed = True
        self._signal()

    def pending(self) -> dict[str, int]:
        """Pods per queue (``active``, ``backoff``, ``unschedulable``), gated ones included."""
        return {ACTIVE: len(self.active), BACKOFF: len(self.backoffq), UNSCHEDULABLE: len(self.unschedulable)}
