"""Informer event handlers: keep the cache, the queue and the pod-group state current.

Mirrors ``pkg/scheduler/eventhandlers.go`` (v1.35.4):

* A pod with a node is *assigned*: it is accounted in the cache (whoever bound it, so other
  schedulers' pods count against capacity) and may wake pods whose affinity or spread
  constraints it satisfies. A pod without one that names one of our profiles is queued.
* A pod this scheduler assumed is left alone until the informer shows it bound (the
  binding cycle owns it until then).
* Node and storage changes move the unschedulable pods whose rejector plugins registered
  the event and whose queueing hint answers Queue (``backend/queue.py``).
* PodGroups go into the pod-group state; the queue sees the change first, then the
  plugins that subscribed to PodGroup changes.

Bad input is contained to its object, and reported here, in one place:

* an object that cannot be decoded reaches ``on_*_invalid``;
* an exception raised while handling one object (a quantity, a selector, an affinity term,
  a bug) is caught by the informer (``kube/informer.py``), logged once with the object's key,
  and reaches ``on_*_error``.

Either way a pod of ours gets a ``FailedScheduling`` event (and ``PodScheduled=False``,
reason ``SchedulerError``) saying why, a node or PodGroup gets a ``Warning`` event with
reason ``FailedProcessing``, a pod of another scheduler is only logged, and the scheduler
goes on with everyone else.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass, field

import msgspec

from ome_scheduler.api.core import Namespace, Node, Pod, PodHead
from ome_scheduler.api.meta import MetaOnly
from ome_scheduler.api.scheduling import PodGroup
from ome_scheduler.backend.cache import SchedulerCache
from ome_scheduler.backend.nominator import Nominator
from ome_scheduler.backend.podgroups import PodGroupState
from ome_scheduler.backend.queue import SchedulingQueue
from ome_scheduler.framework.events import (
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_NODE_ADD,
    EVENT_NODE_DELETE,
    EVENT_UNSCHEDULED_POD_ADD,
    EVENT_UNSCHEDULED_POD_DELETE,
    POD_GROUP,
    ActionType,
    ClusterEvent,
    node_scheduling_properties_change,
    pod_scheduling_properties_change,
)
from ome_scheduler.framework.interface import EventRecorder
from ome_scheduler.framework.types import POD_GROUP_LABEL, PodInfo, PodKey, pod_key
from ome_scheduler.framework.waiting_pods import WaitingPod
from ome_scheduler.logs import get_logger

_POD_HEAD = msgspec.json.Decoder(PodHead)
_META = msgspec.json.Decoder(MetaOnly)

log = get_logger()

FAILED_PROCESSING = "FailedProcessing"
"""The reason of the Warning event on a node or PodGroup the scheduler cannot use."""

EVENT_POD_GROUP_ADD = ClusterEvent(POD_GROUP, ActionType.ADD)
EVENT_POD_GROUP_UPDATE = ClusterEvent(POD_GROUP, ActionType.UPDATE)
EVENT_POD_GROUP_DELETE = ClusterEvent(POD_GROUP, ActionType.DELETE)


@dataclass(kw_only=True)
class EventHandlers:
    """The informers' ``on_add``/``on_update``/``on_delete``/``on_invalid`` callbacks.

    Every handler runs synchronously on the event loop, between scheduling cycles, so a cycle
    never sees a half-applied event. ``pods`` and ``namespaces`` are the scheduler's listers
    (written here, read by the cycles and the Handle); ``profiles`` the scheduler names this
    process serves; ``waiting_pod`` finds a pod's Permit wait; ``component`` is the reporting
    controller of events about nodes and PodGroups (they belong to no profile).
    """

    cache: SchedulerCache
    queue: SchedulingQueue
    pod_groups: PodGroupState
    pods: dict[str, PodInfo]
    namespaces: dict[str, Namespace]
    profiles: Container[str]
    recorder: EventRecorder | None
    waiting_pod: Callable[[PodKey], WaitingPod | None]
    node_listeners: list[Callable[[Node | None, Node | None], None]] = field(default_factory=list)
    """Plugins' node subscriptions (``Handle.subscribe_node_changes``), told after the queue."""
    component: str = "ome-scheduler"
    nominator: Nominator = field(default_factory=Nominator)
    """Our unbound pods nominated to a node (``backend/nominator.py``), as the queue's upstream."""

    def _responsible(self, pod: Pod) -> bool:
        """``responsibleForPod``: the pod names one of our profiles."""
        return pod.spec.scheduler_name in self.profiles

    def _ns_labels(self, ns: str) -> dict[str, str]:
        n = self.namespaces.get(ns)
        return dict(n.metadata.labels) if n is not None else {}

    def _index(self, pi: PodInfo) -> None:
        self.pods[pi.key] = pi
        self.pod_groups.index_pod(pi)

    # ---- pods --------------------------------------------------------------------------

    def on_pod_add(self, pod: Pod) -> None:
        """``addPodToCache`` for an assigned pod, ``addPodToSchedulingQueue`` for ours."""
        pi = PodInfo(pod)
        self._index(pi)
        if pod.spec.node_name:
            self.nominator.delete(pi.pod_key)
            self.cache.add_pod(pi)
            self.queue.assigned_pod_added(pod, self._ns_labels(pod.metadata.namespace))
        elif self._responsible(pod):
            if pod.status.nominated_node_name:
                self.nominator.add(pi, pod.status.nominated_node_name)
            self.queue.add(pi)
        elif pi.gang:
            self._sibling_appeared(pi)

    def _sibling_appeared(self, pi: PodInfo) -> None:
        """A gang member another scheduler serves appeared: its gang's members of ours may now
        have every member they wait for (no cycle of ours runs for it to wake them). Only that
        gang's unschedulable pods are offered the ``UnschedulablePod/Add`` event (mirrors the
        ``MoveAllToActiveOrBackoffQueue`` of ``addPodToSchedulingQueue`` with GangScheduling,
        ``pkg/scheduler/eventhandlers.go``)."""
        gang = pi.gang_key
        self.queue.move_all_to_active_or_backoff(
            EVENT_UNSCHEDULED_POD_ADD, None, pi.pod, precheck=lambda q: q.pod_info.gang_key == gang
        )

    def on_pod_update(self, old: Pod, new: Pod) -> None:
        """``updatePodInCache`` / ``updatePodInSchedulingQueue``."""
        pi: PodInfo | None = None
        if new.spec.node_name and not old.spec.node_name:
            # Most often our own Binding coming back: reuse what the assumption derived.
            assumed = self.cache.assumed_info(pod_key(new.metadata))
            if assumed is not None:
                pi = assumed.rebase(new)
        if pi is None:
            pi = PodInfo(new)
        self._index(pi)
        key = pi.pod_key
        if new.spec.node_name:
            self.nominator.delete(key)
            if not old.spec.node_name:
                # Bound since we last saw it (by us: this confirms the assumption).
                self.queue.delete(key)
                self.cache.add_pod(pi)
                self.queue.assigned_pod_added(new, self._ns_labels(new.metadata.namespace))
                return
            self.cache.update_pod(pi)
            for ev in pod_scheduling_properties_change(new, old):
                self.queue.assigned_pod_updated(old, new, ev, self._ns_labels(new.metadata.namespace))
            return
        if not self._responsible(new):
            if pi.gang and old.metadata.labels.get(POD_GROUP_LABEL) != pi.gang:
                self._sibling_appeared(pi)  # another scheduler's pod joined a gang
            return
        if self.cache.is_assumed(key):
            # Assumed and in its binding cycle: a status patch (nominatedNodeName) must not
            # put it back in the queue while the Binding is in flight (nor count it as a
            # nominated pod: it is on its node already).
            return
        self.nominator.update(old.status.nominated_node_name, pi)
        self.queue.update(old, pi)

    def on_pod_delete(self, pod: Pod) -> None:
        """``deletePodFromCache`` / ``deletePodFromSchedulingQueue``: also rejects its Permit wait."""
        known = self.pods.pop(f"{pod.metadata.namespace}/{pod.metadata.name}", None)
        self.pod_groups.unindex_pod(pod.metadata.namespace, pod.metadata.name)
        key = pod_key(pod.metadata)
        self.nominator.delete(key)
        if pod.spec.node_name and not self.cache.is_assumed(key):
            self.cache.remove_pod(key)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod, None)
            member = known if known is not None else PodInfo(pod)
            if member.gang:
                self.pod_groups.member_left(member)
            return
        if self._responsible(pod):
            self.queue.delete(key)
            wp = self.waiting_pod(key)
            if wp is not None:
                wp.reject("", "pod is deleted")
            self.queue.move_all_to_active_or_backoff(EVENT_UNSCHEDULED_POD_DELETE, pod, None)

    def on_pod_invalid(self, raw: bytes, error: str) -> None:
        """A pod of ours that cannot be read is not scheduled and says why in an event."""
        try:
            head = _POD_HEAD.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return  # not even its name and scheduler are readable
        if head.spec.node_name or head.spec.scheduler_name not in self.profiles:
            return
        md = head.metadata
        note = f"pod {md.namespace}/{md.name} cannot be read: {error}"
        # No PodScheduled patch: the pod's status is unreadable too, so the patch could not tell
        # it is already set, and each patch would come back as another unreadable update.
        self._pod_failed(Pod(metadata=md), head.spec.scheduler_name, note, condition=False)

    def on_pod_error(self, pod: Pod, error: str) -> None:
        """Handling ``pod`` raised (the informer logged it): a pod of ours that is not bound is
        not scheduled and says why; the cache keeps whatever it knew before."""
        md = pod.metadata
        key = pod_key(md)
        if pod.spec.node_name or not self._responsible(pod) or self.cache.is_assumed(key):
            return  # bound, another scheduler's, or in its binding cycle (which owns it until bound)
        self.queue.delete(key)  # an older version may still wait there
        self._pod_failed(pod, pod.spec.scheduler_name, f"pod {md.namespace}/{md.name} cannot be scheduled: {error}")

    def _pod_failed(self, pod: Pod, profile: str, note: str, *, condition: bool = True) -> None:
        """``FailedScheduling`` and (``condition``) ``PodScheduled=False`` with reason
        ``SchedulerError`` on a pod of ours."""
        if self.recorder is None:
            return
        self.recorder.event(
            pod, controller=profile, type_="Warning", reason="FailedScheduling", action="Scheduling", note=note
        )
        if condition:
            self.recorder.pod_scheduled_false(pod, "SchedulerError", note, clear_nominated=False)

    def _warn(self, regarding: Node | PodGroup, note: str) -> None:
        """A Warning event (reason ``FailedProcessing``) on a node or PodGroup the scheduler cannot use."""
        if self.recorder is not None:
            self.recorder.event(
                regarding,
                controller=self.component,
                type_="Warning",
                reason=FAILED_PROCESSING,
                action="Processing",
                note=note,
            )

    # ---- nodes -------------------------------------------------------------------------

    def on_node_add(self, node: Node) -> None:
        """``addNodeToCache``: every pod a new node may help is reconsidered."""
        self.cache.add_or_update_node(node)
        self.queue.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node)
        self._tell_node_listeners(None, node)

    def on_node_update(self, old: Node, new: Node) -> None:
        """``updateNodeInCache``: one queue move per kind of change (labels, taints, ...)."""
        self.cache.add_or_update_node(new)
        for ev in node_scheduling_properties_change(new, old):
            self.queue.move_all_to_active_or_backoff(ev, old, new)
        self._tell_node_listeners(old, new)

    def on_node_delete(self, node: Node) -> None:
        """``deleteNodeFromCache``."""
        self.cache.remove_node(node.metadata.name)
        self.queue.move_all_to_active_or_backoff(EVENT_NODE_DELETE, node, None)
        self._tell_node_listeners(node, None)

    def _tell_node_listeners(self, old: Node | None, new: Node | None) -> None:
        for listener in self.node_listeners:
            listener(old, new)

    def on_node_invalid(self, raw: bytes, error: str) -> None:
        """A node that cannot be read: no pod is placed on it, and it says why."""
        try:
            md = _META.decode(raw).metadata
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        self._warn(Node(metadata=md), f"node {md.name} cannot be read, no pod will be scheduled to it: {error}")

    def on_node_error(self, node: Node, error: str) -> None:
        """Handling ``node`` raised (the informer logged it): the cache keeps its previous
        version, if any, and the node says why."""
        self._warn(node, f"node {node.metadata.name} cannot be used for scheduling: {error}")

    # ---- PodGroups -----------------------------------------------------------------------

    def on_pod_group_add(self, pg: PodGroup) -> None:
        """A PodGroup appeared: its members may now pass PreFilter."""
        self.pod_groups.add_or_update(pg)
        self._pod_group_event(EVENT_POD_GROUP_ADD, None, pg)

    def on_pod_group_update(self, old: PodGroup, new: PodGroup) -> None:
        """A PodGroup changed (size, timeout, topology key annotation, or status only)."""
        self.pod_groups.add_or_update(new)
        self._pod_group_event(EVENT_POD_GROUP_UPDATE, old, new)

    def on_pod_group_delete(self, pg: PodGroup) -> None:
        """A PodGroup was deleted: its members become "not resolvable" again."""
        self.pod_groups.delete(pg)
        self._pod_group_event(EVENT_POD_GROUP_DELETE, pg, None)

    def on_pod_group_invalid(self, raw: bytes, error: str) -> None:
        """A PodGroup that cannot be read: remember why, so its members' FailedScheduling says so."""
        try:
            md = _META.decode(raw).metadata
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        self.pod_groups.set_invalid(md.namespace, md.name, error)
        self._warn(PodGroup(metadata=md), f"PodGroup {md.namespace}/{md.name} cannot be read: {error}")
        # Wake its members (the queueing hint matches the event object's namespace and name) so
        # their next FailedScheduling says why; the unreadable spec stays out of every cache.
        self.queue.move_all_to_active_or_backoff(EVENT_POD_GROUP_UPDATE, None, PodGroup(metadata=md))

    def on_pod_group_error(self, pg: PodGroup, error: str) -> None:
        """Handling ``pg`` raised (the informer logged it): the PodGroup says why."""
        md = pg.metadata
        self._warn(pg, f"PodGroup {md.namespace}/{md.name} cannot be used for scheduling: {error}")

    def _pod_group_event(self, ev: ClusterEvent, old: PodGroup | None, new: PodGroup | None) -> None:
        self.queue.move_all_to_active_or_backoff(ev, old, new)
        self.pod_groups.notify(old, new)

    # ---- namespaces (InterPodAffinity's namespaceSelector) ------------------------------------

    def on_namespace_add(self, ns: Namespace) -> None:
        """Remember the namespace's labels."""
        self.namespaces[ns.metadata.name] = ns

    def on_namespace_update(self, old: Namespace, new: Namespace) -> None:
        """Remember the namespace's new labels."""
        self.namespaces[new.metadata.name] = new

    def on_namespace_delete(self, ns: Namespace) -> None:
        """Forget the namespace."""
        self.namespaces.pop(ns.metadata.name, None)
