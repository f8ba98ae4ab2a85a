"""NodeVolumeLimits: a node takes no more volumes of a CSI driver than its CSINode allows.

Mirrors ``pkg/scheduler/framework/plugins/nodevolumelimits/{csi,utils}.go`` (v1.35.4, with
VolumeLimitScaling off as 1.35 ships it, so there is no "driver not installed" check and no
CSIDriver lookup):

* **PreFilter** skips pods with no PVC, generic ephemeral or migratable in-tree inline volume
  (GCE PD, AWS EBS, Azure Disk, Azure File, Cinder, vSphere, Portworx).
* **Filter**, per node, counts volumes as ``driver/volumeHandle`` (a volume counts once
  however many pods use it):

  - the new pod's volumes: a claim's bound PV's ``spec.csi`` (driver, handle); an in-tree PV
    translated to CSI when migration is on for its plugin on this node; an unbound claim (or
    one whose PV is missing) through its StorageClass's provisioner (an in-tree provisioner
    translated), with the handle ``<random prefix>-<ns>/<claim>``; a generic ephemeral volume
    as claim ``<pod>-<volume>``, which the pod must own; an in-tree inline volume translated
    when migration is on. A claim without a class, a class that does not exist, or a volume
    no driver claims is not counted.
  - the volumes of the pods on the node (bound, assumed, and the nominated pods the framework
    adds), resolved the same way; a missing claim is skipped;
  - the node's VolumeAttachments (``spec.nodeName``) of a PV with a CSI source, counted as
    ``attacher/handle`` unless a pod on the node already counts that volume: attachments count
    even when no pod of the cache uses the volume (detaching, or a pod this scheduler never saw).

  Only drivers whose CSINode entry reports ``allocatable.count`` are limited; when the
  pod's new volumes of one would make attached + new exceed it, the node fails with
  ``node(s) exceed max volume count`` (Unschedulable). A node without a CSINode has no limits.
  Migration is "on" for GCE PD, AWS EBS, Azure Disk and Cinder whenever the node has a
  CSINode, for Portworx when the CSINode's ``storage.alpha.kubernetes.io/migrated-plugins``
  annotation lists it, never for Azure File and vSphere (``isCSIMigrationOn``).
* Errors: the new pod's claim not found is UnschedulableAndUnresolvable ``looking up PVC
  <ns>/<claim>: persistentvolumeclaim "<claim>" not found``; an ephemeral claim the pod does not
  own (``PVC <ns>/<claim> was not created for pod <ns>/<pod> (pod is not owner)``), an inline
  volume that does not translate (``converting volume(<name>) from inline to csi: ...``) or a
  volume claim with no name (``PersistentVolumeClaim had no name``) are Error statuses, for
  the new pod and the pods on the node alike.
* **Queueing hints** (``EventsToRegister``): CSINode added (always Queue); CSINode updated
  when a driver's count grew; a pod with a PVC, ephemeral or migratable inline volume that was
  bound or nominated deleted; a PVC the pod uses (``<pod>-<volume>`` for ephemeral ones)
  added in its namespace; a VolumeAttachment deleted when the pod uses any PVC, or a
  migratable inline volume of the attachment's driver.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

from ome_scheduler.api.core import PersistentVolumeClaim, Pod, Volume
from ome_scheduler.api.storage import CSINode, VolumeAttachment
from ome_scheduler.framework.events import (
    CSI_NODE,
    PERSISTENT_VOLUME_CLAIM,
    POD,
    VOLUME_ATTACHMENT,
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
from ome_scheduler.plugins.csitranslation import (
    AWS_EBS_PLUGIN,
    AZURE_DISK_PLUGIN,
    CINDER_PLUGIN,
    DRIVER_OF_PLUGIN,
    GCE_PD_PLUGIN,
    PORTWORX_PLUGIN,
    TranslationError,
    inline_plugin,
    migrated_on_node,
    pv_plugin,
    translate_inline,
    translate_pv_source,
)
from ome_scheduler.plugins.volumebinding import ephemeral_owned_by, store_of
from ome_scheduler.plugins.volumestore import VolumeStore, claim_class

ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED = "node(s) exceed max volume count"
_ID_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""``k8s.io/apimachinery/pkg/util/rand.String``'s alphabet."""


class PVCNotFound(LookupError):
    """The new pod's claim does not exist (``apierrors.IsNotFound``): unresolvable until it is created."""


class VolumeError(ValueError):
    """A volume the plugin cannot count (Error status)."""


def migration_on(csi_node: CSINode | None, plugin: str) -> bool:
    """``isCSIMigrationOn`` (CSIMigrationPortworx on): always for GCE PD, AWS EBS, Azure Disk and
    Cinder on a node with a CSINode; Portworx when the CSINode's annotation lists it."""
    if csi_node is None or not plugin:
        return False
    if plugin in (AWS_EBS_PLUGIN, GCE_PD_PLUGIN, AZURE_DISK_PLUGIN, CINDER_PLUGIN):
        return True
    if plugin == PORTWORX_PLUGIN:
        return migrated_on_node(plugin, csi_node)
    return False


def counts_volumes(pod: Pod) -> bool:
    """Whether PreFilter does not skip ``pod``: it has a claim, a generic ephemeral or a
    migratable in-tree inline volume (a pod without volumes: no work)."""
    return any(_counted_volume(v) for v in pod.spec.volumes)


def _counted_volume(v: Volume) -> bool:
    """A volume PreFilter does not skip: a claim, a generic ephemeral or a migratable inline volume."""
    return v.persistent_volume_claim is not None or v.ephemeral is not None or inline_plugin(v) != ""


class NodeVolumeLimits(PreFilterPlugin, FilterPlugin, SignPlugin):
    """No arguments. Reads PVs, claims, StorageClasses, CSINodes and VolumeAttachments from the
    handle's :class:`~ome_scheduler.plugins.volumestore.VolumeStore`: the informers' copies of PVs
    and claims, as upstream's listers (VolumeBinding's assumptions are not seen)."""

    name = "NodeVolumeLimits"

    def __init__(self, handle: Handle | None = None) -> None:
        self.handle = handle
        self.random_prefix = "".join(random.choices(_ID_ALPHABET, k=32))
        """``randomVolumeIDPrefix``: unbound claims' handles can never equal a real volume's."""

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """``SignPod``: the pod's volume sources (``VolumesSigner``)."""
        return [(VOLUMES_SIGNER, volumes_signer(pod.pod))]

    @property
    def store(self) -> VolumeStore:
        """The VolumeStore of the handle (an empty one without a handle)."""
        if self.handle is None:
            return VolumeStore()
        return store_of(self.handle)

    # ---- PreFilter / Filter -----------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[set[str] | None, Status | None]:
        """``PreFilter``: Skip pods without PVC, ephemeral or migratable in-tree volumes."""
        if counts_volumes(pod.pod):
            return None, None
        return None, Status(Code.SKIP)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """``Filter``: the pod's new volumes of each limited driver must fit beside the node's."""
        if not pod.pod.spec.volumes:
            return None
        vs = self.store
        csi_node = vs.csi_node(node.name)
        new_volumes: dict[str, str] = {}
        try:
            self.attachable_volumes(vs, pod.pod, csi_node, new_volumes, new_pod=True)
        except PVCNotFound as exc:
            return Status.unresolvable(str(exc))
        except VolumeError as exc:
            return Status.as_error(exc)
        if not new_volumes:
            return None
        limits = csi_node.volume_limits() if csi_node is not None else {}
        if not limits:
            return None
        try:
            attached, counts = self.node_volume_counts(vs, node, csi_node)
        except (PVCNotFound, VolumeError) as exc:
            return Status.as_error(exc)
        for unique in attached:
            new_volumes.pop(unique, None)  # a volume already on the node is not new
        new_counts: dict[str, int] = {}
        for driver in new_volumes.values():
            new_counts[driver] = new_counts.get(driver, 0) + 1
        for driver, n in new_counts.items():
            limit = limits.get(driver)
            if limit is not None and counts.get(driver, 0) + n > limit:
                return Status.unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED)
        return None

    # ---- counting -----------------------------------------------------------------------------

    def node_volume_counts(
        self, vs: VolumeStore, node: NodeInfo, csi_node: CSINode | None
    ) -> tuple[dict[str, str], dict[str, int]]:
        """The volumes ``node`` already has, as Filter counts them: (``driver/handle -> driver``
        for the volumes of its pods, attached volumes per driver: those plus the node's
        VolumeAttachments no pod of it counts). A volume counts once however many pods use it.

        Raises:
            VolumeError: a pod on the node has a claim with no name, an ephemeral claim it does
                not own, or an inline volume that does not translate (Filter's Error status).
        """
        attached: dict[str, str] = {}
        for existing in node.pods.values():
            self.attachable_volumes(vs, existing.pod, csi_node, attached, new_pod=False)
        counts: dict[str, int] = {}
        for driver in attached.values():
            counts[driver] = counts.get(driver, 0) + 1
        for unique, driver in self.node_attachments(vs, node.name).items():
            if unique not in attached:
                counts[driver] = counts.get(driver, 0) + 1
        return attached, counts

    def attachable_volumes(
        self, vs: VolumeStore, pod: Pod, csi_node: CSINode | None, result: dict[str, str], *, new_pod: bool
    ) -> None:
        """``filterAttachableVolumes``: add ``driver/handle -> driver`` for each volume of ``pod``.

        Raises:
            PVCNotFound: a claim of the new pod (``new_pod``) does not exist.
            VolumeError: a claim with no name, an ephemeral claim the pod does not own, or an
                inline volume that does not translate.
        """
        ns = pod.metadata.namespace
        for vol in pod.spec.volumes:
            ephemeral = False
            if vol.persistent_volume_claim is not None:
                claim = vol.persistent_volume_claim.claim_name
            elif vol.ephemeral is not None:
                claim = f"{pod.metadata.name}-{vol.name}"
                ephemeral = True
            else:
                self._inline(vol, csi_node, ns, result)
                continue
            if not claim:
                raise VolumeError("PersistentVolumeClaim had no name")
            pvc = vs.pvc_api_object(ns, claim)
            if pvc is None:
                if new_pod:
                    raise PVCNotFound(f'looking up PVC {ns}/{claim}: persistentvolumeclaim "{claim}" not found')
                continue
            if ephemeral:
                err = ephemeral_owned_by(pod, pvc)
                if err:
                    raise VolumeError(err)
            driver, handle = self.csi_driver_info(vs, csi_node, pvc)
            if driver and handle:
                result[f"{driver}/{handle}"] = driver

    def _inline(self, vol: Volume, csi_node: CSINode | None, namespace: str, result: dict[str, str]) -> None:
        """``checkAttachableInlineVolume``: a migratable inline volume counts when migration is on.

        Raises:
            VolumeError: the volume does not translate.
        """
        plugin = inline_plugin(vol)
        if not plugin or not migration_on(csi_node, plugin):
            return
        try:
            _, handle = translate_inline(vol, namespace)
        except TranslationError as exc:
            raise VolumeError(f"converting volume({vol.name}) from inline to csi: {exc}") from None
        driver = DRIVER_OF_PLUGIN[plugin]
        result[f"{driver}/{handle}"] = driver

    def csi_driver_info(self, vs: VolumeStore, csi_node: CSINode | None, pvc: PersistentVolumeClaim) -> tuple[str, str]:
        """``getCSIDriverInfo``: (driver, volume handle) of a claim; ("", "") when it does not count."""
        if not pvc.spec.volume_name:
            return self._from_class(vs, csi_node, pvc)
        pv = vs.pv_api_object(pvc.spec.volume_name)
        if pv is None:
            return self._from_class(vs, csi_node, pvc)
        csi = pv.spec.csi
        if csi is None:
            plugin = pv_plugin(pv)
            if not plugin or not migration_on(csi_node, plugin):
                return "", ""
            try:
                csi = translate_pv_source(pv)
            except TranslationError:
                return "", ""
        return csi.driver, csi.volume_handle

    def _from_class(self, vs: VolumeStore, csi_node: CSINode | None, pvc: PersistentVolumeClaim) -> tuple[str, str]:
        """``getCSIDriverInfoFromSC``: the class's provisioner (translated when in-tree) and a
        handle unique to the claim."""
        name = claim_class(pvc)
        if not name:
            return "", ""
        sc = vs.storage_class(name)
        if sc is None:
            return "", ""
        handle = f"{self.random_prefix}-{pvc.metadata.namespace}/{pvc.metadata.name}"
        provisioner = sc.provisioner
        if provisioner in DRIVER_OF_PLUGIN:
            if not migration_on(csi_node, provisioner):
                return "", ""
            return DRIVER_OF_PLUGIN[provisioner], handle
        return provisioner, handle

    @staticmethod
    def node_attachments(vs: VolumeStore, node: str) -> dict[str, str]:
        """``getNodeVolumeAttachmentInfo``: ``attacher/handle -> attacher`` for the node's
        attachments of PVs with a CSI source (no attacher, no PV name, a missing or non-CSI PV:
        not counted)."""
        out: dict[str, str] = {}
        for va in vs.attachments_on(node):
            pv_name = va.spec.source.persistent_volume_name
            if not va.spec.attacher or pv_name is None:
                continue
            pv = vs.pv_api_object(pv_name)
            if pv is None or pv.spec.csi is None:
                continue
            out[f"{va.spec.attacher}/{pv.spec.csi.volume_handle}"] = va.spec.attacher
        return out

    # ---- queueing -----------------------------------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint[Any]]:
        """CSINode add/update, Pod delete, PVC add, VolumeAttachment delete (``EventsToRegister``)."""
        return [
            on(CSI_NODE, ActionType.ADD),
            on(CSI_NODE, ActionType.UPDATE, is_schedulable_after_csinode_updated),
            on(POD, ActionType.DELETE, is_schedulable_after_pod_deleted),
            on(PERSISTENT_VOLUME_CLAIM, ActionType.ADD, is_schedulable_after_pvc_added),
            on(VOLUME_ATTACHMENT, ActionType.DELETE, is_schedulable_after_attachment_deleted),
        ]


def _counts(drivers: Iterable[Any]) -> dict[str, int]:
    return {d.name: (d.allocatable.count or 0) if d.allocatable is not None else 0 for d in drivers}


@queueing_hint
def is_schedulable_after_csinode_updated(pod: Pod, old: CSINode | None, new: CSINode | None) -> QueueingHint:
    """``isSchedulableAfterCSINodeUpdated``: Queue when some driver's count grew (a driver
    absent before, or without a count, had 0)."""
    if old is None or new is None:
        return QueueingHint.QUEUE
    before = _counts(old.spec.drivers or ())
    for name, count in _counts(new.spec.drivers or ()).items():
        if count > before.get(name, 0):
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


@queueing_hint
def is_schedulable_after_pod_deleted(pod: Pod, old: Pod | None, new: Pod | None) -> QueueingHint:
    """``isSchedulableAfterPodDeleted``: Queue when the deleted pod was bound or nominated and
    had a PVC, ephemeral or migratable inline volume."""
    deleted = old if old is not None else new
    if deleted is None:
        return QueueingHint.QUEUE
    if not deleted.spec.volumes:
        return QueueingHint.QUEUE_SKIP
    if not deleted.spec.node_name and not deleted.status.nominated_node_name:
        return QueueingHint.QUEUE_SKIP
    if any(_counted_volume(v) for v in deleted.spec.volumes):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


@queueing_hint
def is_schedulable_after_pvc_added(
    pod: Pod, old: PersistentVolumeClaim | None, new: PersistentVolumeClaim | None
) -> QueueingHint:
    """``isSchedulableAfterPVCAdded``: Queue when the new claim is one of the pod's (its
    namespace, a claim volume or an ephemeral volume's ``<pod>-<volume>``)."""
    if new is None:
        return QueueingHint.QUEUE
    if new.metadata.namespace != pod.metadata.namespace:
        return QueueingHint.QUEUE_SKIP
    for v in pod.spec.volumes:
        if v.persistent_volume_claim is not None:
            name = v.persistent_volume_claim.claim_name
        elif v.ephemeral is not None:
            name = f"{pod.metadata.name}-{v.name}"
        else:
            continue
        if name == new.metadata.name:
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


@queueing_hint
def is_schedulable_after_attachment_deleted(
    pod: Pod, old: VolumeAttachment | None, new: VolumeAttachment | None
) -> QueueingHint:
    """``isSchedulableAfterVolumeAttachmentDeleted``: Queue when the pod uses a PVC (ephemeral
    volumes do not count here, as upstream), or a migratable inline volume whose CSI driver is
    the attachment's attacher; a volume that does not translate is Queue too (upstream's error)."""
    deleted = old if old is not None else new
    if deleted is None:
        return QueueingHint.QUEUE
    for v in pod.spec.volumes:
        if v.persistent_volume_claim is not None:
            return QueueingHint.QUEUE
        if not inline_plugin(v):
            continue
        try:
            driver, _ = translate_inline(v, pod.metadata.namespace)
        except TranslationError:
            return QueueingHint.QUEUE
        if driver == deleted.spec.attacher:
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP
