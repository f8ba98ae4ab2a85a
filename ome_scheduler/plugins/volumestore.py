"""The storage objects the volume plugins read, and the PV/PVC helpers they share.

``VolumeStore`` is the scheduler's view of PersistentVolumes, PersistentVolumeClaims,
StorageClasses, CSINodes, VolumeAttachments, CSIDrivers and CSIStorageCapacities, kept current by informers
(``app/informers.py``); VolumeAttachments are indexed by node, so NodeVolumeLimits reads one
node's attachments without listing them all as upstream's lister does. Like upstream's assume caches
(``pkg/scheduler/framework/plugins/volumebinding/assume_cache.go``), VolumeBinding can
*assume* a PV bound to a claim or a claim annotated with a selected node at Reserve; the
assumed copy wins until the informer delivers a newer version or Unreserve restores it.

The helpers mirror ``k8s.io/component-helpers/storage/volume`` (``GetPersistentVolumeClaimClass``,
``CheckNodeAffinity``, ``FindMatchingVolume``, ``IsDelayBindingMode``...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ome_scheduler.api.core import PersistentVolume, PersistentVolumeClaim, StorageClass
from ome_scheduler.api.storage import CSIDriver, CSINode, CSIStorageCapacity, VolumeAttachment
from ome_scheduler.framework.events import (
    CSI_DRIVER,
    CSI_NODE,
    CSI_STORAGE_CAPACITY,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    STORAGE_CLASS,
    VOLUME_ATTACHMENT,
    ActionType,
    ClusterEvent,
)
from ome_scheduler.util.labels import NodeSelectorMatcher, Selector
from ome_scheduler.util.quantity import value

BETA_STORAGE_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"

MoveFn = Callable[[ClusterEvent, Any, Any], None]


def claim_class(pvc: PersistentVolumeClaim) -> str:
    """``GetPersistentVolumeClaimClass``: the beta annotation wins over ``spec.storageClassName``."""
    ann = pvc.metadata.annotations
    if BETA_STORAGE_CLASS_ANNOTATION in ann:
        return ann[BETA_STORAGE_CLASS_ANNOTATION]
    return pvc.spec.storage_class_name or ""


def volume_class(pv: PersistentVolume) -> str:
    """``GetPersistentVolumeClass``."""
    ann = pv.metadata.annotations
    if BETA_STORAGE_CLASS_ANNOTATION in ann:
        return ann[BETA_STORAGE_CLASS_ANNOTATION]
    return pv.spec.storage_class_name


def pv_node_affinity_matches(pv: PersistentVolume, labels: Mapping[str, str]) -> bool:
    """``CheckNodeAffinity``: the PV's required node selector against node *labels only*.

    Upstream builds a node with labels and no name, so ``matchFields`` requirements are
    ignored (a term of only matchFields matches every node)."""
    na = pv.spec.node_affinity
    if na is None or na.required is None:
        return True
    matcher = NodeSelectorMatcher.from_node_selector(na.required)
    for exprs, _fields in matcher.terms:
        if not exprs and not _fields:
            continue
        if all(r.matches(labels) for r in exprs):
            return True
    return False


def is_pvc_fully_bound(pvc: PersistentVolumeClaim) -> bool:
    """``isPVCFullyBound``: a volume name and the ``bind-completed`` annotation."""
    return bool(pvc.spec.volume_name) and ANN_BIND_COMPLETED in pvc.metadata.annotations


def is_volume_bound_to_claim(pv: PersistentVolume, pvc: PersistentVolumeClaim) -> bool:
    """``IsVolumeBoundToClaim``: claimRef names the claim (and its uid when set)."""
    ref = pv.spec.claim_ref
    if ref is None:
        return False
    if ref.name != pvc.metadata.name or ref.namespace != pvc.metadata.namespace:
        return False
    return not ref.uid or ref.uid == pvc.metadata.uid


def _storage(rl: Mapping[str, str]) -> int:
    q = rl.get("storage")
    return value(q) if q else 0


def claim_request(pvc: PersistentVolumeClaim) -> int:
    """The claim's ``resources.requests.storage`` in bytes (0 when absent)."""
    return _storage(pvc.spec.resources.requests)


def find_matching_volume(
    pvc: PersistentVolumeClaim,
    volumes: Iterable[PersistentVolume],
    node_labels: Mapping[str, str] | None,
    excluded: Mapping[str, PersistentVolume],
    delay_binding: bool,
) -> PersistentVolume | None:
    """``FindMatchingVolume`` (VolumeAttributesClass on): the smallest fitting available PV,
    or the PV already pre-bound to the claim (None when its node affinity fails)."""
    smallest: PersistentVolume | None = None
    smallest_qty = 0
    requested = claim_request(pvc)
    requested_class = claim_class(pvc)
    selector = Selector.from_label_selector(pvc.spec.selector) if pvc.spec.selector is not None else None
    for pv in volumes:
        if pv.metadata.name in excluded:
            continue
        if pv.spec.claim_ref is not None and not is_volume_bound_to_claim(pv, pvc):
            continue
        qty = _storage(pv.spec.capacity)
        if qty < requested:
            continue
        if (pvc.spec.volume_mode or "Filesystem") != (pv.spec.volume_mode or "Filesystem"):
            continue
        if (pvc.spec.volume_attributes_class_name or "") != (pv.spec.volume_attributes_class_name or ""):
            continue
        if pv.metadata.deletion_timestamp is not None:
            continue
        affinity_ok = node_labels is None or pv_node_affinity_matches(pv, node_labels)
        if is_volume_bound_to_claim(pv, pvc):
            return pv if affinity_ok else None
        if node_labels is None and delay_binding:
            continue
        if pv.status.phase != "Available":
            continue
        if selector is not None and not selector.matches(pv.metadata.labels):
            continue
        if volume_class(pv) != requested_class:
            continue
        if not affinity_ok:
            continue
        if node_labels is not None and not set(pvc.spec.access_modes) <= set(pv.spec.access_modes):
            continue
        if smallest is None or smallest_qty > qty:
            smallest, smallest_qty = pv, qty
    return smallest


def _rv(obj: PersistentVolume | PersistentVolumeClaim) -> int:
    try:
        return int(obj.metadata.resource_version or 0)
    except ValueError:
        return 0


class VolumeStore:
    """PVs by name, PVCs by ``ns/name``, StorageClasses and CSINodes by name (with assumed
    overlays for PVs and claims), VolumeAttachments by node then name.

    ``move`` is called with each storage event so the queue can retry pods the volume
    plugins rejected (``eventhandlers.go`` registers PV, PVC, StorageClass, CSINode and
    VolumeAttachment handlers).
    """

    def __init__(self, move: MoveFn | None = None) -> None:
        self.move = move
        self._pvs: dict[str, PersistentVolume] = {}
        self._pvcs: dict[str, PersistentVolumeClaim] = {}
        self._classes: dict[str, StorageClass] = {}
        self._assumed_pvs: dict[str, PersistentVolume] = {}
        self._assumed_pvcs: dict[str, PersistentVolumeClaim] = {}
        self._csi_nodes: dict[str, CSINode] = {}
        self._attachments: dict[str, dict[str, VolumeAttachment]] = {}
        """Node name -> VolumeAttachment name -> the attachment (``spec.nodeName`` indexes it)."""
        self._attachment_node: dict[str, str] = {}
        """VolumeAttachment name -> the node it is indexed under."""
        self._csi_drivers: dict[str, CSIDriver] = {}
        self._capacities: dict[str, CSIStorageCapacity] = {}
        """CSIStorageCapacities by ``namespace/name``."""

    # ---- reads --------------------------------------------------------------------------

    def pvc(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        """The claim ``namespace/name`` (an assumed version first), or None."""
        key = f"{namespace}/{name}"
        return self._assumed_pvcs.get(key) or self._pvcs.get(key)

    def pv(self, name: str) -> PersistentVolume | None:
        """The PV ``name`` (an assumed version first), or None."""
        return self._assumed_pvs.get(name) or self._pvs.get(name)

    def pvc_api_object(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        """The informer's copy, ignoring assumptions (``GetAPIObj``)."""
        return self._pvcs.get(f"{namespace}/{name}")

    def pv_api_object(self, name: str) -> PersistentVolume | None:
        """The informer's copy of PV ``name``, ignoring assumptions."""
        return self._pvs.get(name)

    def pvs_of_class(self, class_name: str) -> list[PersistentVolume]:
        """``ListPVs(storageClassName)``, assumed versions included."""
        out = []
        for name in self._pvs.keys() | self._assumed_pvs.keys():
            pv = self.pv(name)
            if pv is not None and volume_class(pv) == class_name:
                out.append(pv)
        return out

    def storage_class(self, name: str) -> StorageClass | None:
        """The StorageClass ``name``, or None."""
        return self._classes.get(name)

    def csi_node(self, name: str) -> CSINode | None:
        """The CSINode of node ``name`` (named after it), or None (``CSINodes().Get``)."""
        return self._csi_nodes.get(name)

    def attachments_on(self, node: str) -> Iterable[VolumeAttachment]:
        """The VolumeAttachments whose ``spec.nodeName`` is ``node``, in no particular order."""
        return self._attachments.get(node, {}).values()

    def csi_driver(self, name: str) -> CSIDriver | None:
        """The CSIDriver ``name``, or None."""
        return self._csi_drivers.get(name)

    def capacities(self) -> Iterable[CSIStorageCapacity]:
        """Every CSIStorageCapacity (``List(labels.Everything())``), in no particular order."""
        return self._capacities.values()

    def is_delay_binding(self, pvc: PersistentVolumeClaim) -> bool:
        """``IsDelayBindingMode``: the claim's class exists and is WaitForFirstConsumer.

        Raises:
            ValueError: the class has no volumeBindingMode (upstream's error text).
        """
        name = claim_class(pvc)
        if not name:
            return False
        sc = self._classes.get(name)
        if sc is None:
            return False
        if sc.volume_binding_mode is None:
            raise ValueError(f'VolumeBindingMode not set for StorageClass "{name}"')
        return sc.volume_binding_mode == WAIT_FOR_FIRST_CONSUMER

    # ---- assume -------------------------------------------------------------------------

    def assume_pv(self, pv: PersistentVolume) -> None:
        """Let ``pv`` (a modified copy) shadow the informer's version."""
        self._assumed_pvs[pv.metadata.name] = pv

    def restore_pv(self, name: str) -> None:
        """Drop an assumed PV version."""
        self._assumed_pvs.pop(name, None)

    def assume_pvc(self, pvc: PersistentVolumeClaim) -> None:
        """Let ``pvc`` (a modified copy) shadow the informer's version."""
        self._assumed_pvcs[f"{pvc.metadata.namespace}/{pvc.metadata.name}"] = pvc

    def restore_pvc(self, key: str) -> None:
        """Drop an assumed claim version (key ``namespace/name``)."""
        self._assumed_pvcs.pop(key, None)

    # ---- informer handlers --------------------------------------------------------------

    def _emit(self, resource: str, action: ActionType, old: Any, new: Any) -> None:
        if self.move is not None:
            self.move(ClusterEvent(resource, action), old, new)

    def on_pv_add(self, pv: PersistentVolume) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._pvs[pv.metadata.name] = pv
        self._emit(PERSISTENT_VOLUME, ActionType.ADD, None, pv)

    def on_pv_update(self, old: PersistentVolume, new: PersistentVolume) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._pvs[new.metadata.name] = new
        assumed = self._assumed_pvs.get(new.metadata.name)
        if assumed is not None and _rv(new) >= _rv(assumed):
            del self._assumed_pvs[new.metadata.name]
        self._emit(PERSISTENT_VOLUME, ActionType.UPDATE, old, new)

    def on_pv_delete(self, pv: PersistentVolume) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._pvs.pop(pv.metadata.name, None)
        self._assumed_pvs.pop(pv.metadata.name, None)
        self._emit(PERSISTENT_VOLUME, ActionType.DELETE, pv, None)

    def on_pvc_add(self, pvc: PersistentVolumeClaim) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._pvcs[f"{pvc.metadata.namespace}/{pvc.metadata.name}"] = pvc
        self._emit(PERSISTENT_VOLUME_CLAIM, ActionType.ADD, None, pvc)

    def on_pvc_update(self, old: PersistentVolumeClaim, new: PersistentVolumeClaim) -> None:
        """Informer handler: update the store and emit the cluster event."""
        key = f"{new.metadata.namespace}/{new.metadata.name}"
        self._pvcs[key] = new
        assumed = self._assumed_pvcs.get(key)
        if assumed is not None and _rv(new) >= _rv(assumed):
            del self._assumed_pvcs[key]
        self._emit(PERSISTENT_VOLUME_CLAIM, ActionType.UPDATE, old, new)

    def on_pvc_delete(self, pvc: PersistentVolumeClaim) -> None:
        """Informer handler: update the store and emit the cluster event."""
        key = f"{pvc.metadata.namespace}/{pvc.metadata.name}"
        self._pvcs.pop(key, None)
        self._assumed_pvcs.pop(key, None)
        self._emit(PERSISTENT_VOLUME_CLAIM, ActionType.DELETE, pvc, None)

    def on_class_add(self, sc: StorageClass) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._classes[sc.metadata.name] = sc
        self._emit(STORAGE_CLASS, ActionType.ADD, None, sc)

    def on_class_update(self, old: StorageClass, new: StorageClass) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._classes[new.metadata.name] = new
        self._emit(STORAGE_CLASS, ActionType.UPDATE, old, new)

    def on_class_delete(self, sc: StorageClass) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._classes.pop(sc.metadata.name, None)
        self._emit(STORAGE_CLASS, ActionType.DELETE, sc, None)

    def on_csinode_add(self, cn: CSINode) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._csi_nodes[cn.metadata.name] = cn
        self._emit(CSI_NODE, ActionType.ADD, None, cn)

    def on_csinode_update(self, old: CSINode, new: CSINode) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._csi_nodes[new.metadata.name] = new
        self._emit(CSI_NODE, ActionType.UPDATE, old, new)

    def on_csinode_delete(self, cn: CSINode) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._csi_nodes.pop(cn.metadata.name, None)
        self._emit(CSI_NODE, ActionType.DELETE, cn, None)

    def _index_attachment(self, va: VolumeAttachment) -> None:
        self._unindex_attachment(va.metadata.name)
        node = va.spec.node_name
        self._attachments.setdefault(node, {})[va.metadata.name] = va
        self._attachment_node[va.metadata.name] = node

    def _unindex_attachment(self, name: str) -> None:
        node = self._attachment_node.pop(name, None)
        if node is None:
            return
        on_node = self._attachments.get(node)
        if on_node is not None:
            on_node.pop(name, None)
            if not on_node:
                del self._attachments[node]

    def on_attachment_add(self, va: VolumeAttachment) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._index_attachment(va)
        self._emit(VOLUME_ATTACHMENT, ActionType.ADD, None, va)

    def on_attachment_update(self, old: VolumeAttachment, new: VolumeAttachment) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._index_attachment(new)
        self._emit(VOLUME_ATTACHMENT, ActionType.UPDATE, old, new)

    def on_attachment_delete(self, va: VolumeAttachment) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._unindex_attachment(va.metadata.name)
        self._emit(VOLUME_ATTACHMENT, ActionType.DELETE, va, None)

    def on_csidriver_add(self, d: CSIDriver) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._csi_drivers[d.metadata.name] = d
        self._emit(CSI_DRIVER, ActionType.ADD, None, d)

    def on_csidriver_update(self, old: CSIDriver, new: CSIDriver) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._csi_drivers[new.metadata.name] = new
        self._emit(CSI_DRIVER, ActionType.UPDATE, old, new)

    def on_csidriver_delete(self, d: CSIDriver) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._csi_drivers.pop(d.metadata.name, None)
        self._emit(CSI_DRIVER, ActionType.DELETE, d, None)

    def on_capacity_add(self, c: CSIStorageCapacity) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._capacities[f"{c.metadata.namespace}/{c.metadata.name}"] = c
        self._emit(CSI_STORAGE_CAPACITY, ActionType.ADD, None, c)

    def on_capacity_update(self, old: CSIStorageCapacity, new: CSIStorageCapacity) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._capacities[f"{new.metadata.namespace}/{new.metadata.name}"] = new
        self._emit(CSI_STORAGE_CAPACITY, ActionType.UPDATE, old, new)

    def on_capacity_delete(self, c: CSIStorageCapacity) -> None:
        """Informer handler: update the store and emit the cluster event."""
        self._capacities.pop(f"{c.metadata.namespace}/{c.metadata.name}", None)
        self._emit(CSI_STORAGE_CAPACITY, ActionType.DELETE, c, None)
