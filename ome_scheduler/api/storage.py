"""``storage.k8s.io/v1`` CSINode, VolumeAttachment, CSIDriver and CSIStorageCapacity records.

Mirrors ``k8s.io/api/storage/v1/types.go``, declaring only the fields the scheduler reads.
StorageClass, the other ``storage.k8s.io/v1`` record the scheduler reads, stays beside the
volume records in :mod:`ome_scheduler.api.core`.
"""

from __future__ import annotations

import msgspec

from ome_scheduler.api.meta import LabelSelector, ObjectMeta, Record

MIGRATED_PLUGINS_ANNOTATION = "storage.alpha.kubernetes.io/migrated-plugins"
"""``v1.MigratedPluginsAnnotationKey``: a CSINode's comma-separated in-tree plugin names
(``kubernetes.io/gce-pd``, ...) whose volumes the node's CSI drivers serve."""


class VolumeNodeResources(Record, gc=False):
    """``storagev1.VolumeNodeResources``: ``count`` is the most volumes of the driver one node
    may have attached (None: the driver reports no limit)."""

    count: int | None = None


class CSINodeDriver(Record, gc=False):
    """``storagev1.CSINodeDriver``: one CSI driver registered on the node (``nodeID`` is the
    storage system's name for the node)."""

    name: str = ""
    node_id: str = msgspec.field(default="", name="nodeID")
    topology_keys: list[str] | None = None
    """Go's ``[]string`` without omitempty: the kubelet writes ``null`` for a driver without keys."""
    allocatable: VolumeNodeResources | None = None


class CSINodeSpec(Record, gc=False):
    """``storagev1.CSINodeSpec``: the drivers the kubelet registered."""

    drivers: list[CSINodeDriver] | None = None
    """``null`` on a CSINode whose kubelet registered no driver (Go's nil slice, no omitempty)."""


class CSINode(Record):
    """``storagev1.CSINode``: named after its Node; NodeVolumeLimits reads each driver's
    ``allocatable.count``, both volume plugins the migrated-plugins annotation."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: CSINodeSpec = msgspec.field(default_factory=CSINodeSpec)

    def volume_limits(self) -> dict[str, int]:
        """``getVolumeLimits``: driver name -> attachable volumes, for drivers that report a count."""
        return {
            d.name: d.allocatable.count
            for d in self.spec.drivers or ()
            if d.allocatable is not None and d.allocatable.count is not None
        }


class VolumeAttachmentSource(Record, gc=False):
    """``storagev1.VolumeAttachmentSource``: the PersistentVolume attached (None for an inline
    volume, which NodeVolumeLimits does not count from attachments)."""

    persistent_volume_name: str | None = None


class VolumeAttachmentSpec(Record, gc=False):
    """``storagev1.VolumeAttachmentSpec``: which CSI driver (``attacher``) attaches what to which node."""

    attacher: str = ""
    source: VolumeAttachmentSource = msgspec.field(default_factory=VolumeAttachmentSource)
    node_name: str = ""


class VolumeAttachment(Record):
    """``storagev1.VolumeAttachment``: a volume attached (or being attached or detached) to a
    node, whichever pod uses it; its status is not read (upstream counts every attachment)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: VolumeAttachmentSpec = msgspec.field(default_factory=VolumeAttachmentSpec)


class CSIDriverSpec(Record, gc=False):
    """``storagev1.CSIDriverSpec``: ``storageCapacity`` opts the driver into capacity-aware
    provisioning (VolumeBinding then reads its CSIStorageCapacities)."""

    storage_capacity: bool | None = None


class CSIDriver(Record):
    """``storagev1.CSIDriver``: named after the driver (a StorageClass's ``provisioner``)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: CSIDriverSpec = msgspec.field(default_factory=CSIDriverSpec)


class CSIStorageCapacity(Record):
    """``storagev1.CSIStorageCapacity`` (namespaced; top-level fields): the room a driver reports
    for volumes of ``storageClassName`` on the nodes ``nodeTopology`` selects. ``capacity`` and
    ``maximumVolumeSize`` are quantity strings (bytes); None when not reported."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    node_topology: LabelSelector | None = None
    storage_class_name: str = ""
    capacity: str | None = None
    maximum_volume_size: str | None = None
