"""VolumeRestrictions: volumes that cannot be shared between pods on one node or cluster-wide.

Mirrors ``pkg/scheduler/framework/plugins/volumerestrictions/volume_restrictions.go``:

* In-tree disks: a GCE PD (unless both read-only), an AWS EBS volume, an iSCSI IQN (unless
  both read-only) or an RBD image (overlapping monitors, same pool and image, unless both
  read-only) already used by a pod on the node rejects it with ``node(s) had no available
  disk`` (Unschedulable).
* ReadWriteOncePod claims: PreFilter looks every claim up (a missing one is
  ``persistentvolumeclaim "x" not found``, UnschedulableAndUnresolvable, so later PreFilters
  do not run); when a ReadWriteOncePod claim is already used by any pod in the cluster,
  every node rejects with ``node(s) unavailable due to PersistentVolumeClaim with
  ReadWriteOncePod access mode already in-use by another pod``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ome_scheduler.api.core import PersistentVolumeClaim, Pod, Volume
from ome_scheduler.framework.events import (
    PERSISTENT_VOLUME_CLAIM,
    ActionType,
    ClusterEventWithHint,
    QueueingHint,
    on,
    queueing_hint,
)
from ome_scheduler.framework.interface import (
    CycleState,
    FilterPlugin,
    Handle,
    PreFilterExtensions,
    PreFilterPlugin,
    SignFragment,
    SignPlugin,
)
from ome_scheduler.framework.signers import VOLUMES_SIGNER, volumes_signer
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.plugins.volumebinding import store_of, uses_claim

ERR_REASON_DISK_CONFLICT = "node(s) had no available disk"
ERR_REASON_RWOP_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
)
_STATE = "PreFilterVolumeRestrictions"


def _needs_check(v: Volume) -> bool:
    return (
        v.gce_persistent_disk is not None
        or v.aws_elastic_block_store is not None
        or v.rbd is not None
        or v.iscsi is not None
    )


def is_volume_conflict(v: Volume, other: Pod) -> bool:
    """``isVolumeConflict``: does ``v`` clash with a volume of ``other``?"""
    for ev in other.spec.volumes:
        a, b = v.gce_persistent_disk, ev.gce_persistent_disk
        if a is not None and b is not None:
            if a.get("pdName") == b.get("pdName") and not (a.get("readOnly") and b.get("readOnly")):
                return True
        a, b = v.aws_elastic_block_store, ev.aws_elastic_block_store
        if a is not None and b is not None and a.get("volumeID") == b.get("volumeID"):
            return True
        a, b = v.iscsi, ev.iscsi
        if a is not None and b is not None:
            if a.get("iqn") == b.get("iqn") and not (a.get("readOnly") and b.get("readOnly")):
                return True
        a, b = v.rbd, ev.rbd
        if a is not None and b is not None:
            overlap = bool(set(a.get("monitors") or []) & set(b.get("monitors") or []))
            if (
                overlap
                and a.get("pool", "") == b.get("pool", "")
                and a.get("image") == b.get("image")
                and not (a.get("readOnly") and b.get("readOnly"))
            ):
                return True
    return False


def satisfies_volume_conflicts(pod: Pod, node: NodeInfo) -> bool:
    """``satisfyVolumeConflicts``."""
    for v in pod.spec.volumes:
        if not _needs_check(v):
            continue
        for ep in node.pods.values():
            if is_volume_conflict(v, ep.pod):
                return False
    return True


@queueing_hint
def is_schedulable_after_own_claim_event(
    pod: Pod, old: PersistentVolumeClaim | None, new: PersistentVolumeClaim | None
) -> QueueingHint:
    """PVC Add (VolumeRestrictions) or Add/Update (VolumeZone): Queue when the claim is one the
    pod mounts (``isSchedulableAfterPersistentVolumeClaimAdded`` of
    ``framework/plugins/volumerestrictions`` and ``...Change`` of ``framework/plugins/volumezone``)."""
    return QueueingHint.QUEUE if new is not None and uses_claim(pod, new) else QueueingHint.QUEUE_SKIP


class _State:
    """``preFilterState``: the pod's ReadWriteOncePod claim names and how many pods use them."""

    __slots__ = ("rwop", "conflicts")

    def __init__(self, rwop: frozenset[str], conflicts: int) -> None:
        self.rwop = rwop
        self.conflicts = conflicts

    def clone(self) -> _State:
        """``Clone``: the names shared, the count copied."""
        return _State(self.rwop, self.conflicts)

    def update_with_pod(self, other: PodInfo, multiplier: int) -> None:
        """``updateWithPod``: add or take ``other``'s volumes naming one of the claims (by claim
        name only, as upstream)."""
        n = sum(
            1
            for v in other.pod.spec.volumes
            if v.persistent_volume_claim is not None and v.persistent_volume_claim.claim_name in self.rwop
        )
        self.conflicts += multiplier * n


class VolumeRestrictions(PreFilterPlugin, PreFilterExtensions, FilterPlugin, SignPlugin):
    """No arguments."""

    name = "VolumeRestrictions"

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: the pod's volume sources (``VolumesSigner``)."""
        return [(VOLUMES_SIGNER, volumes_signer(pod.pod))]

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """``PreFilter``: claims must exist; count ReadWriteOncePod claims already in use.

        Skip when there is nothing to check."""
        spec = pod.pod.spec
        needs_check = any(_needs_check(v) for v in spec.volumes)
        vs = store_of(self.handle)
        rwop: set[str] = set()
        for v in spec.volumes:
            if v.persistent_volume_claim is None:
                continue
            name = v.persistent_volume_claim.claim_name
            pvc: PersistentVolumeClaim | None = vs.pvc(pod.namespace, name)
            if pvc is None:
                return None, Status.unresolvable(f'persistentvolumeclaim "{name}" not found')
            if "ReadWriteOncePod" in pvc.spec.access_modes:
                rwop.add(pvc.metadata.name)
        conflicts = 0
        if rwop:
            used = {k for n in self.handle.node_infos() for k in n.pvc_ref_counts}
            conflicts = sum(1 for name in rwop if f"{pod.namespace}/{name}" in used)
        if not needs_check and conflicts == 0:
            return None, Status(Code.SKIP)
        state.write(_STATE, _State(frozenset(rwop), conflicts))
        return None, None

    def add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo, node: NodeInfo) -> Status | None:
        """``AddPod``: ``to_add``'s uses of the pod's ReadWriteOncePod claims count.

        Raises:
            KeyError: PreFilter wrote no state.
        """
        st: _State = state.read(_STATE)
        st.update_with_pod(to_add, 1)
        return None

    def remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node: NodeInfo) -> Status | None:
        """``RemovePod``: ``to_remove``'s uses no longer count.

        Raises:
            KeyError: PreFilter wrote no state.
        """
        st: _State = state.read(_STATE)
        st.update_with_pod(to_remove, -1)
        return None

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """``Filter``: in-tree disk conflicts on the node, then ReadWriteOncePod conflicts anywhere."""
        if not satisfies_volume_conflicts(pod.pod, node):
            return Status.unschedulable(ERR_REASON_DISK_CONFLICT)
        st: _State | None = state.get(_STATE)
        if st is not None and st.conflicts > 0:
            return Status.unschedulable(ERR_REASON_RWOP_CONFLICT)
        return None

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """Pod delete, Node add and PVC add, with upstream's hints."""
        return [
            on("Pod", ActionType.DELETE, self.is_schedulable_after_pod_deleted),
            on("Node", ActionType.ADD),
            on(PERSISTENT_VOLUME_CLAIM, ActionType.ADD, self.is_schedulable_after_persistent_volume_claim_added),
        ]

    is_schedulable_after_persistent_volume_claim_added = staticmethod(is_schedulable_after_own_claim_event)
    """Queue when a claim the pod uses was added."""

    @staticmethod
    @queueing_hint
    def is_schedulable_after_pod_deleted(pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
        """Queue when a deleted pod of the namespace held a conflicting disk or one of the pod's claims."""
        if old is None or old.metadata.namespace != pod.metadata.namespace:
            return QueueingHint.QUEUE_SKIP
        ni = NodeInfo("")
        ni.add_pod(PodInfo(old))
        if not satisfies_volume_conflicts(pod, ni):
            return QueueingHint.QUEUE
        claims = {v.persistent_volume_claim.claim_name for v in pod.spec.volumes if v.persistent_volume_claim}
        for v in old.spec.volumes:
            if v.persistent_volume_claim is not None and v.persistent_volume_claim.claim_name in claims:
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
