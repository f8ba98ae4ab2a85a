"""VolumeZone: a pod's bound PVs must be in the node's zone and region.

Mirrors ``pkg/scheduler/framework/plugins/volumezone/volume_zone.go``: PreFilter collects the
zone/region labels (GA and beta keys) of the PVs bound to the pod's claims (unbound
WaitForFirstConsumer claims are skipped; an unbound claim of another mode is ``PersistentVolume
had no name``; missing objects are ``... not found``, all UnschedulableAndUnresolvable);
Filter rejects a node that has any topology label but not one of a PV's values for that key
(``node(s) had no available volume zone``, UnschedulableAndUnresolvable). Multi-zone PV labels
use ``__`` as separator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ome_scheduler.api.core import PersistentVolume, Pod, StorageClass
from ome_scheduler.framework.events import (
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    STORAGE_CLASS,
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
    PreFilterPlugin,
    SignFragment,
    SignPlugin,
)
from ome_scheduler.framework.signers import VOLUMES_SIGNER, volumes_signer
from ome_scheduler.framework.status import Code, Status
from ome_scheduler.framework.types import NodeInfo, PodInfo
from ome_scheduler.plugins.volumebinding import store_of
from ome_scheduler.plugins.volumerestrictions import is_schedulable_after_own_claim_event
from ome_scheduler.plugins.volumestore import WAIT_FOR_FIRST_CONSUMER, claim_class

ERR_REASON_CONFLICT = "node(s) had no available volume zone"
ZONE_BETA = "failure-domain.beta.kubernetes.io/zone"
REGION_BETA = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
TOPOLOGY_LABELS = (ZONE_BETA, REGION_BETA, ZONE, REGION)
_STATE = "PreFilterVolumeZone"


@dataclass(frozen=True, slots=True)
class PVTopology:
    """One topology label of a PV: key and the set of allowed values."""

    pv_name: str
    key: str
    values: frozenset[str]


def translate_to_ga(key: str) -> str:
    """``translateToGALabel``: beta zone/region keys to their GA names."""
    return {REGION_BETA: REGION, ZONE_BETA: ZONE}.get(key, key)


def pv_topologies(pv: PersistentVolume) -> list[PVTopology]:
    """``getPVTopologies``: labels split on ``__`` (a label with an empty part is ignored)."""
    out = []
    for key in TOPOLOGY_LABELS:
        v = pv.metadata.labels.get(key)
        if v is None:
            continue
        parts = v.split("__") if v else []
        if any(p == "" for p in parts):
            continue
        out.append(PVTopology(pv.metadata.name, key, frozenset(parts)))
    return out


class VolumeZone(PreFilterPlugin, FilterPlugin, SignPlugin):
    """No arguments."""

    name = "VolumeZone"

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: the pod's volume sources (``VolumesSigner``)."""
        return [(VOLUMES_SIGNER, volumes_signer(pod.pod))]

    def _topologies(self, pod: Pod) -> tuple[list[PVTopology], Status | None]:
        vs = store_of(self.handle)
        out: list[PVTopology] = []
        for v in pod.spec.volumes:
            if v.persistent_volume_claim is None:
                continue
            name = v.persistent_volume_claim.claim_name
            if not name:
                return [], Status.unresolvable("PersistentVolumeClaim had no name")
            pvc = vs.pvc(pod.metadata.namespace, name)
            if pvc is None:
                return [], Status.unresolvable(f'persistentvolumeclaim "{name}" not found')
            pv_name = pvc.spec.volume_name
            if not pv_name:
                sc_name = claim_class(pvc)
                if not sc_name:
                    return [], Status.unresolvable("PersistentVolumeClaim had no pv name and storageClass name")
                sc = vs.storage_class(sc_name)
                if sc is None:
                    return [], Status.unresolvable(f'storageclass.storage.k8s.io "{sc_name}" not found')
                if sc.volume_binding_mode is None:
                    return [], Status.unresolvable(f'VolumeBindingMode not set for StorageClass "{sc_name}"')
                if sc.volume_binding_mode == WAIT_FOR_FIRST_CONSUMER:
                    continue
                return [], Status.unresolvable("PersistentVolume had no name")
            pv = vs.pv(pv_name)
            if pv is None:
                return [], Status.unresolvable(f'persistentvolume "{pv_name}" not found')
            out.extend(pv_topologies(pv))
        return out, None

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """``PreFilter``: the bound PVs' topology labels; Skip when there are none."""
        tops, st = self._topologies(pod.pod)
        if st is not None:
            return None, st
        if not tops:
            return None, Status(Code.SKIP)
        state.write(_STATE, tops)
        return None, None

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """``Filter``: a node with topology labels must carry one of each PV label's values."""
        if not pod.pod.spec.volumes:
            return None
        tops: list[PVTopology] | None = state.get(_STATE)
        if tops is None:
            tops, st = self._topologies(pod.pod)
            if st is not None:
                return st
        labels = node.labels
        if not any(k in labels for k in TOPOLOGY_LABELS):
            return None
        for t in tops:
            v = labels.get(t.key)
            if v is None:
                v = labels.get(translate_to_ga(t.key))
            if v is None or v not in t.values:
                return Status.unresolvable(ERR_REASON_CONFLICT)
        return None

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """StorageClass add, Node add/label, PVC and PV add/update, with upstream's hints."""
        return [
            on(STORAGE_CLASS, ActionType.ADD, self.is_schedulable_after_storage_class_added),
            on("Node", ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
            on(
                PERSISTENT_VOLUME_CLAIM,
                ActionType.ADD | ActionType.UPDATE,
                self.is_schedulable_after_persistent_volume_claim_change,
            ),
            on(
                PERSISTENT_VOLUME,
                ActionType.ADD | ActionType.UPDATE,
                self.is_schedulable_after_persistent_volume_change,
            ),
        ]

    is_schedulable_after_persistent_volume_claim_change = staticmethod(is_schedulable_after_own_claim_event)
    """Queue when a claim the pod uses was added or updated."""

    @staticmethod
    @queueing_hint
    def is_schedulable_after_storage_class_added(
        pod: Pod, old: StorageClass | None, new: StorageClass | None
    ) -> QueueingHint:
        """Queue when a WaitForFirstConsumer StorageClass was added."""
        if new is not None and new.volume_binding_mode == WAIT_FOR_FIRST_CONSUMER:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @staticmethod
    @queueing_hint
    def is_schedulable_after_persistent_volume_change(
        pod: Pod, old: PersistentVolume | None, new: PersistentVolume | None
    ) -> QueueingHint:
        """Queue when a PV was added or its zone/region labels changed."""
        if old is None or new is None:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE if pv_topologies(old) != pv_topologies(new) else QueueingHint.QUEUE_SKIP
