"""Cluster events and queueing hints.

Mirrors ``k8s.io/kube-scheduler/framework/types.go`` (``ActionType``, ``EventResource``,
``ClusterEvent``, ``QueueingHint``) and ``pkg/scheduler/framework/events.go`` (which update of
a pod or node maps to which action). A plugin registers the events that can make a pod it
rejected schedulable, each with a hint function that looks at the event's objects and
answers Queue or QueueSkip for one pod.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Any, Generic, ParamSpec, TypeVar

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.logs import enabled, get_logger

log = get_logger()
T = TypeVar("T")
P = ParamSpec("P")


class ActionType(IntFlag):
    """What happened to an object; the Update* flags narrow a generic update."""

    NONE = 0
    ADD = 1 << 0
    DELETE = 1 << 1
    UPDATE_NODE_ALLOCATABLE = 1 << 2
    UPDATE_NODE_LABEL = 1 << 3
    UPDATE_NODE_TAINT = 1 << 4
    UPDATE_NODE_CONDITION = 1 << 5
    UPDATE_NODE_ANNOTATION = 1 << 6
    UPDATE_NODE_DECLARED_FEATURE = 1 << 7
    UPDATE_POD_LABEL = 1 << 8
    UPDATE_POD_SCALE_DOWN = 1 << 9
    UPDATE_POD_TOLERATION = 1 << 10
    UPDATE_POD_SCHEDULING_GATES_ELIMINATED = 1 << 11
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = 1 << 12
    ALL = (1 << 13) - 1
    UPDATE = ALL & ~(ADD | DELETE)


_ACTION_LABELS = {
    ActionType.ADD: "Add",
    ActionType.DELETE: "Delete",
    ActionType.UPDATE_NODE_ALLOCATABLE: "UpdateNodeAllocatable",
    ActionType.UPDATE_NODE_LABEL: "UpdateNodeLabel",
    ActionType.UPDATE_NODE_TAINT: "UpdateNodeTaint",
    ActionType.UPDATE_NODE_CONDITION: "UpdateNodeCondition",
    ActionType.UPDATE_NODE_ANNOTATION: "UpdateNodeAnnotation",
    ActionType.UPDATE_POD_LABEL: "UpdatePodLabel",
    ActionType.UPDATE_POD_SCALE_DOWN: "UpdatePodScaleDown",
    ActionType.UPDATE_POD_TOLERATION: "UpdatePodToleration",
    ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED: "UpdatePodSchedulingGatesEliminated",
    ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM: "UpdatePodGeneratedResourceClaim",
    ActionType.UPDATE: "Update",
    ActionType.ALL: "All",
}

POD = "Pod"
ASSIGNED_POD = "AssignedPod"
UNSCHEDULED_POD = "UnschedulablePod"
NODE = "Node"
PERSISTENT_VOLUME = "PersistentVolume"
PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
STORAGE_CLASS = "storage.k8s.io/StorageClass"
CSI_NODE = "storage.k8s.io/CSINode"
RESOURCE_CLAIM = "resource.k8s.io/ResourceClaim"
RESOURCE_SLICE = "resource.k8s.io/ResourceSlice"
DEVICE_CLASS = "resource.k8s.io/DeviceClass"
VOLUME_ATTACHMENT = "storage.k8s.io/VolumeAttachment"
CSI_DRIVER = "storage.k8s.io/CSIDriver"
CSI_STORAGE_CAPACITY = "storage.k8s.io/CSIStorageCapacity"
NAMESPACE = "Namespace"
POD_GROUP = "podgroups.v1alpha1.scheduling.x-k8s.io"
WILDCARD = "*"


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """A (resource, action) pair; ``custom_label`` names the wildcard moves."""

    resource: str
    action: ActionType
    custom_label: str = ""

    def label(self) -> str:
        """The metric label upstream uses, e.g. ``NodeAdd`` or ``AssignedPodDelete``."""
        if self.custom_label:
            return self.custom_label
        res = self.resource.rsplit("/", 1)[-1] if "/" in self.resource else self.resource
        return res + _ACTION_LABELS.get(self.action, str(int(self.action)))

    def is_wildcard(self) -> bool:
        """The catch-all event (``*``/All) used for forced moves such as UnschedulableTimeout."""
        return self.resource == WILDCARD and self.action == ActionType.ALL

    def matches(self, incoming: ClusterEvent) -> bool:
        """``MatchClusterEvents``: does this registered event cover ``incoming``?"""
        if self.is_wildcard():
            return True
        r = self.resource
        res_ok = (
            r == WILDCARD
            or r == incoming.resource
            or (r == POD and incoming.resource in (ASSIGNED_POD, UNSCHEDULED_POD))
        )
        return res_ok and bool(self.action & incoming.action) and incoming.action <= self.action


EVENT_ASSIGNED_POD_ADD = ClusterEvent(ASSIGNED_POD, ActionType.ADD)
EVENT_ASSIGNED_POD_DELETE = ClusterEvent(ASSIGNED_POD, ActionType.DELETE)
EVENT_UNSCHEDULED_POD_ADD = ClusterEvent(UNSCHEDULED_POD, ActionType.ADD)
EVENT_UNSCHEDULED_POD_DELETE = ClusterEvent(UNSCHEDULED_POD, ActionType.DELETE)
EVENT_NODE_ADD = ClusterEvent(NODE, ActionType.ADD)
EVENT_NODE_DELETE = ClusterEvent(NODE, ActionType.DELETE)
EVENT_UNSCHEDULABLE_TIMEOUT = ClusterEvent(WILDCARD, ActionType.ALL, "UnschedulableTimeout")
EVENT_FORCE_ACTIVATE = ClusterEvent(WILDCARD, ActionType.ALL, "ForceActivate")


class QueueingHint(IntEnum):
    """``fwk.QueueingHint``: Queue (the event may make the pod schedulable) or QueueSkip."""

    QUEUE_SKIP = 0
    QUEUE = 1


QueueingHintFn = Callable[[Pod, T | None, T | None], QueueingHint]
"""``(target pod, old object, new object) -> hint``; None is the missing side of an add or
delete; raising an exception counts as Queue."""


@dataclass(frozen=True)
class ClusterEventWithHint(Generic[T]):
    """``ClusterEventWithHint``: an event and the hint for its objects (of type ``T``); no hint means Queue.

    Not ``slots=True``: on Python 3.11 and 3.12 a frozen slotted generic dataclass cannot be
    built through its subscripted alias (``ClusterEventWithHint[Node](...)`` raises TypeError).
    """

    event: ClusterEvent
    hint: QueueingHintFn[T] | None = None


def on(resource: str, actions: ActionType, hint: QueueingHintFn[T] | None = None) -> ClusterEventWithHint[T]:
    """One ``EventsToRegister`` entry: ``actions`` on ``resource``, checked by ``hint`` (None:
    every such event re-queues the pod)."""
    return ClusterEventWithHint(ClusterEvent(resource, actions), hint)


def queueing_hint(fn: Callable[P, QueueingHint]) -> Callable[P, QueueingHint]:
    """Decorate a hint ``(pod, old, new)`` (or method) to log its verdict at V(5), as upstream's hints do.

    The log line names the hint, the pod and the event object; below ``--v=5`` the only cost
    is the wrapper call and one verbosity check.
    """

    @functools.wraps(fn)
    def logged(*args: P.args, **kwargs: P.kwargs) -> QueueingHint:
        verdict = fn(*args, **kwargs)
        if enabled(5):
            pod, old, new = args[-3:]
            obj = new if new is not None else old
            log.info(
                "queueing hint",
                v=5,
                hint=fn.__qualname__,
                pod=_key(pod),
                object=_key(obj) if obj is not None else None,
                verdict="Queue" if verdict == QueueingHint.QUEUE else "QueueSkip",
            )
        return verdict

    return logged


def _key(obj: Any) -> str:
    """``namespace/name`` of an API object (``name`` when cluster-scoped)."""
    md = obj.metadata
    return f"{md.namespace}/{md.name}" if md.namespace else str(md.name)


def pod_scheduling_properties_change(new: Pod, old: Pod) -> list[ClusterEvent]:
    """``PodSchedulingPropertiesChange``: the events an update of a pod stands for (labels,
    requests scaled down, scheduling gates removed, tolerations added; else a plain Update).

    Not modelled: ``UpdatePodGeneratedResourceClaim`` (DynamicResourceAllocation; issue 24)."""
    from ome_scheduler.framework.types import pod_requests

    r = ASSIGNED_POD if new.spec.node_name else UNSCHEDULED_POD
    events: list[ClusterEvent] = []
    if new.metadata.labels != old.metadata.labels:
        events.append(ClusterEvent(r, ActionType.UPDATE_POD_LABEL))
    # extractPodScaleDown: the requests with the status (InPlacePodVerticalScaling), so a resize
    # the kubelet actuated or that went Infeasible is seen; a resource no longer requested counts
    # as scaled down even at 0. Upstream compares MilliValue(); the integers here are millicores
    # for cpu and Value() otherwise, which differ only for fractional byte amounts.
    old_req = pod_requests(old)
    new_req = pod_requests(new)
    if any(k not in new_req or new_req[k] < v for k, v in old_req.items()):
        events.append(ClusterEvent(r, ActionType.UPDATE_POD_SCALE_DOWN))
    if not new.spec.scheduling_gates and old.spec.scheduling_gates:
        events.append(ClusterEvent(r, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED))
    if len(new.spec.tolerations) != len(old.spec.tolerations):
        events.append(ClusterEvent(r, ActionType.UPDATE_POD_TOLERATION))
    if new.status.resource_claim_statuses != old.status.resource_claim_statuses:
        events.append(ClusterEvent(r, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM))
    if not events:
        events.append(ClusterEvent(r, ActionType.UPDATE))
    return events


def node_scheduling_properties_change(new: Node, old: Node) -> list[ClusterEvent]:
    """``NodeSchedulingPropertiesChange``: the events an update of a node stands for."""
    events: list[ClusterEvent] = []
    if new.spec.unschedulable != old.spec.unschedulable and not new.spec.unschedulable:
        events.append(ClusterEvent(NODE, ActionType.UPDATE_NODE_TAINT))
    if new.status.allocatable != old.status.allocatable:
        events.append(ClusterEvent(NODE, ActionType.UPDATE_NODE_ALLOCATABLE))
    if new.metadata.labels != old.metadata.labels:
        events.append(ClusterEvent(NODE, ActionType.UPDATE_NODE_LABEL))
    if new.spec.taints != old.spec.taints:
        events.append(ClusterEvent(NODE, ActionType.UPDATE_NODE_TAINT))
    if {c.type: c.status for c in new.status.conditions} != {c.type: c.status for c in old.status.conditions}:
        events.append(ClusterEvent(NODE, ActionType.UPDATE_NODE_CONDITION))
    if new.metadata.annotations != old.metadata.annotations:
        events.append(ClusterEvent(NODE, ActionType.UPDATE_NODE_ANNOTATION))
    return events
