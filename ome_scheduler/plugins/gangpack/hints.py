"""OMEGangPack's queueing hints (``docs/design/gang-scheduling.md`` §6.2).

Each hint answers, for one pod this plugin rejected (the *target*) and one cluster event,
whether the event may make the target schedulable (Queue) or not (QueueSkip). They are
named after what they check, as kube-scheduler's are, and log their verdict at V(5)
(``@queueing_hint``). No
registration uses the generic Pod Update action, so status churn wakes no gang.

Node events answer Queue only when they can make room for the target (product rule 10): a
node joining a domain of the target's topology key, or one whose allocatable grew, that was
uncordoned, lost a taint or changed labels (node affinity may match now). Node conditions are
not registered: a condition that matters reaches a node as a taint. A deleted node never adds
room (upstream's NodeResourcesFit does not register node deletes either), except to the gang
that holds or waits in its domain: its pin must be re-planned (rule 9). CSINode and
VolumeAttachment events answer as NodeVolumeLimits' hints do, for gang targets whose room
counts attach limits (§3.1).
"""

from __future__ import annotations

from typing import Any

from ome_scheduler.api.core import Node, Pod
from ome_scheduler.api.scheduling import PodGroup, same_definition
from ome_scheduler.api.storage import CSINode, VolumeAttachment
from ome_scheduler.config.pluginargs import OMEGangPackArgs
from ome_scheduler.framework.events import (
    CSI_NODE,
    POD_GROUP,
    VOLUME_ATTACHMENT,
    ActionType,
    ClusterEventWithHint,
    QueueingHint,
    on,
    queueing_hint,
)
from ome_scheduler.framework.gangsource import gang_name
from ome_scheduler.framework.interface import PodGroupLister
from ome_scheduler.framework.topology import domain_value
from ome_scheduler.framework.types import Resource, gang_key
from ome_scheduler.plugins.gangpack.deviceroom import device_events
from ome_scheduler.plugins.gangpack.gang import same_pod
from ome_scheduler.plugins.gangpack.pins import PinStore
from ome_scheduler.plugins.nodevolumelimits import (
    counts_volumes,
    is_schedulable_after_attachment_deleted,
    is_schedulable_after_csinode_updated,
)

QUEUE, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP


def gang_of(pod: Pod) -> str:
    """The pod's gang name (``""`` for a standalone pod): its PodGroup, or its LWS group (§2.1)."""
    return gang_name(pod.metadata)


def was_bound(pod: Pod) -> bool:
    """Whether the API server bound the pod (its ``PodScheduled`` condition is True); an assumed
    pod forgotten after a failed Permit wait or Binding never was."""
    return any(c.type == "PodScheduled" and c.status == "True" for c in pod.status.conditions)


def in_same_gang(target: Pod, other: Pod | None) -> bool:
    """``other`` is a member of the target's gang (same namespace and PodGroup name)."""
    g = gang_of(target)
    return (
        bool(g) and other is not None and other.metadata.namespace == target.metadata.namespace and gang_of(other) == g
    )


class GangHints:
    """The hint functions, bound to the plugin's arguments and the PodGroup lister."""

    def __init__(self, args: OMEGangPackArgs, pod_groups: PodGroupLister, pins: PinStore) -> None:
        self.args = args
        self.pod_groups = pod_groups
        self.pins = pins

    def events(self) -> list[ClusterEventWithHint[Any]]:
        """``EventsToRegister``: the eleven registrations of §6.2 (the device room's two among them)."""
        node_changes = (
            ActionType.ADD
            | ActionType.UPDATE_NODE_ALLOCATABLE
            | ActionType.UPDATE_NODE_TAINT
            | ActionType.UPDATE_NODE_LABEL
        )
        return [
            on("Pod", ActionType.ADD, self.is_schedulable_after_sibling_added),
            on("Pod", ActionType.UPDATE_POD_LABEL, self.is_schedulable_after_pod_label_change),
            on("Pod", ActionType.UPDATE_POD_TOLERATION, self.is_schedulable_after_toleration_change),
            on(
                "Pod",
                ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN,
                self.is_schedulable_after_pod_delete_or_scale_down,
            ),
            on("Node", node_changes, self.is_schedulable_after_domain_node_change),
            on("Node", ActionType.DELETE, self.is_schedulable_after_domain_node_delete),
            on(
                POD_GROUP,
                ActionType.ADD | ActionType.UPDATE | ActionType.DELETE,
                self.is_schedulable_after_own_pod_group_change,
            ),
            *device_events(),  # device room: slices and claim allocations (deviceroom.py)
            on(CSI_NODE, ActionType.ADD | ActionType.UPDATE, self.is_schedulable_after_attach_limit_raised),
            on(VOLUME_ATTACHMENT, ActionType.DELETE, self.is_schedulable_after_volume_detached),
        ]

    @queueing_hint
    def is_schedulable_after_sibling_added(self, target: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
        """Pod Add (assigned pods, and unscheduled members another scheduler serves): Queue when the
        added pod is a member of the target's gang."""
        if in_same_gang(target, new):
            return QUEUE  # a gang sibling was placed
        return SKIP  # not a gang sibling

    @queueing_hint
    def is_schedulable_after_pod_label_change(self, target: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
        """UpdatePodLabel: Queue for the target itself, or when a pod joins or leaves its gang."""
        if new is not None and same_pod(new, target):
            return QUEUE  # the target's own labels changed
        if gang_of(target) and (in_same_gang(target, old) or in_same_gang(target, new)):
            return QUEUE  # gang membership changed
        return SKIP  # unrelated pod

    @queueing_hint
    def is_schedulable_after_toleration_change(self, target: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
        """UpdatePodToleration: Queue for the target itself or a member of its gang."""
        if new is not None and (same_pod(new, target) or in_same_gang(target, new)):
            return QUEUE  # the target or a sibling changed tolerations
        return SKIP  # unrelated pod

    @queueing_hint
    def is_schedulable_after_pod_delete_or_scale_down(
        self, target: Pod, old: Pod | None, new: Pod | None
    ) -> QueueingHint:
        """Pod Delete / UpdatePodScaleDown: Queue when capacity was freed or a sibling changed."""
        if new is not None and same_pod(new, target):
            return QUEUE  # the target itself shrank
        if new is None and old is not None and in_same_gang(target, old) and not was_bound(old):
            # A sibling's assumption was forgotten (its Permit wait ended): it freed nothing the
            # target needs, and waking the target would let a release feed itself (rule 10).
            return SKIP
        if in_same_gang(target, old) or in_same_gang(target, new):
            return QUEUE  # a gang sibling left or shrank
        if old is not None and not old.spec.node_name and not old.status.nominated_node_name:
            return SKIP  # an unplaced pod frees no capacity
        return QUEUE  # a placed pod freed capacity

    def _topology_key_for(self, target: Pod) -> str:
        """§2.3, hint variant: the PodGroup's annotation when it is valid and set, else the fallback."""
        g = gang_of(target)
        if g:
            pg = self.pod_groups.get(target.metadata.namespace, g)
            ann = self.args.pod_group_topology_key_annotation
            if pg is not None and (pg.spec.min_member or 0) > 0 and ann and pg.metadata.annotations.get(ann):
                return pg.metadata.annotations[ann]
        return self.args.topology_key

    @queueing_hint
    def is_schedulable_after_domain_node_change(self, target: Pod, old: Node | None, new: Node | None) -> QueueingHint:
        """Node Add/Update: Queue when the change can make room in a domain of the target's key:
        the node joined or moved into a domain, or (in one) its allocatable grew, it was
        uncordoned, lost a taint or changed labels. A standalone target (kept off a held node)
        queues on a new node and on label changes (it may have left a held domain)."""
        if new is None:
            return SKIP  # nothing to add room to
        if not gang_of(target):
            if old is None or old.metadata.labels != new.metadata.labels:
                return QUEUE  # a new node, or one that may have left a held domain
            return SKIP  # its holds did not move
        tk = self._topology_key_for(target)
        if not tk:
            return QUEUE  # no topology key resolves: any node may matter
        domain = new.metadata.labels.get(tk, "")
        if not domain:
            return SKIP  # node outside every {tk} domain
        if old is None or old.metadata.labels.get(tk, "") != domain:
            return QUEUE  # a node joined the {tk} domain
        if can_add_room(old, new):
            return QUEUE  # the node can take more than before
        return SKIP  # nothing a member could use changed

    @queueing_hint
    def is_schedulable_after_domain_node_delete(self, target: Pod, old: Node | None, new: Node | None) -> QueueingHint:
        """Node Delete: Queue only for the gang that holds or waits in the node's domain (its pin
        must be re-planned); a deleted node adds room to no one else."""
        g = gang_of(target)
        pin = self.pins.get(gang_key(target.metadata.namespace, g)) if g else None
        if pin is None or old is None:
            return SKIP  # a deleted node adds no room
        if domain_value(old.metadata.labels, pin.domain.topology_key) == pin.domain.value:
            return QUEUE  # the gang's pinned domain lost a node
        return SKIP  # another domain lost a node

    @queueing_hint
    def is_schedulable_after_own_pod_group_change(
        self, target: Pod, old: PodGroup | None, new: PodGroup | None
    ) -> QueueingHint:
        """PodGroup Add/Update/Delete: Queue when the event's object is the target's own PodGroup and
        it was added, deleted or redefined (a status write, the scheduler's own, changes nothing)."""
        g = gang_of(target)
        if not g:
            return SKIP  # standalone pod
        obj = new if new is not None else old
        if obj is not None and obj.metadata.namespace == target.metadata.namespace and obj.metadata.name == g:
            if old is not None and new is not None and same_definition(old, new):
                return SKIP  # only its status or the scheduler's status annotations changed
            return QUEUE  # its PodGroup changed
        return SKIP  # another PodGroup

    @queueing_hint
    def is_schedulable_after_attach_limit_raised(
        self, target: Pod, old: CSINode | None, new: CSINode | None
    ) -> QueueingHint:
        """CSINode Add/Update (the room counts attach limits, §3.1): QueueSkip for a standalone
        target or one without a claim, ephemeral or migratable inline volume; otherwise as
        NodeVolumeLimits answers: Queue on an add, and on an update when a driver's count grew."""
        if not gang_of(target) or not counts_volumes(target):
            return SKIP  # its room does not count attach limits
        if old is None:
            return QUEUE  # a new CSINode (NodeVolumeLimits queues on every add)
        return is_schedulable_after_csinode_updated(target, old, new)

    @queueing_hint
    def is_schedulable_after_volume_detached(
        self, target: Pod, old: VolumeAttachment | None, new: VolumeAttachment | None
    ) -> QueueingHint:
        """VolumeAttachment Delete (an attachment freed a slot, §3.1): QueueSkip for a standalone
        target; otherwise as NodeVolumeLimits answers (Queue when the target uses a claim, or a
        migratable inline volume of the attachment's driver)."""
        if not gang_of(target):
            return SKIP  # its room does not count attach limits
        return is_schedulable_after_attachment_deleted(target, old, new)


def can_add_room(old: Node, new: Node) -> bool:
    """Whether an update lets the node take pods it could not take before: allocatable grew in
    some resource, the node was uncordoned, lost a taint, or its labels changed. Quantities that
    do not parse count as a change (the cache reports the node)."""
    if old.metadata.labels != new.metadata.labels:
        return True
    if old.spec.unschedulable and not new.spec.unschedulable:
        return True
    kept = {(t.key, t.value, t.effect) for t in new.spec.taints}
    if any((t.key, t.value, t.effect) not in kept for t in old.spec.taints):
        return True
    if old.status.allocatable == new.status.allocatable:
        return False
    try:
        a, b = Resource.from_list(old.status.allocatable), Resource.from_list(new.status.allocatable)
    except ValueError:
        return True
    if b.milli_cpu > a.milli_cpu or b.memory > a.memory or b.ephemeral_storage > a.ephemeral_storage:
        return True
    if b.allowed_pod_number > a.allowed_pod_number:
        return True
    return any(v > a.scalar.get(k, 0) for k, v in b.scalar.items())
